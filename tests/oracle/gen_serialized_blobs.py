"""SerializeBlob of Caffe2's C++-object blobs (owner: issue #16): counters, indexes, maps, tree cursors.

Writes OUT/serialized/blobs.json: per case the ops that build the blob (fed inputs first), the bytes
``workspace.SerializeBlob`` gives (hex), and the bytes again after a DeserializeBlob into a fresh
workspace (a map re-inserts its entries, so its order changes).  The test builds the same blobs in
netviz and compares bytes both ways.
"""
import os

import numpy as np

from _common import OUT, core, workspace, write_json

#: case -> (feeds {name: (values, dtype)}, [(op type, inputs, outputs, args)], blob to serialize)
CASES = {
    "counter": ({}, [("CreateCounter", [], ["b"], {"init_count": 7}), ("CountDown", ["b"], ["d"], {})], "b"),
    "counter_negative": ({}, [("CreateCounter", [], ["b"], {"init_count": 0}),
                              ("CountDown", ["b"], ["d"], {})], "b"),
    "int_index_frozen": ({"k": ([5, 9, 2, 9], "int32")},
                         [("IntIndexCreate", [], ["b"], {"max_elements": 10}), ("IndexGet", ["b", "k"], ["ids"], {}),
                          ("IndexFreeze", ["b"], ["b"], {})], "b"),
    "long_index_default_max": ({"k": ([1 << 40, -3], "int64")},
                               [("LongIndexCreate", [], ["b"], {}), ("IndexGet", ["b", "k"], ["ids"], {})], "b"),
    "string_index": ({"k": (["bb", "a", "bb"], "object")},
                     [("StringIndexCreate", [], ["b"], {}), ("IndexGet", ["b", "k"], ["ids"], {})], "b"),
    "empty_index": ({}, [("IntIndexCreate", [], ["b"], {})], "b"),
    "map_64_32": ({"k": ([7, -3, 40, 7, 12], "int64"), "v": ([1, 2, 3, 4, 5], "int32")},
                  [("KeyValueToMap", ["k", "v"], ["b"], {})], "b"),
    "map_32_64_rehashed": ({"k": (list(np.random.RandomState(30).randint(-50, 3000, 30)), "int32"),
                            "v": (list(range(30)), "int64")}, [("KeyValueToMap", ["k", "v"], ["b"], {})], "b"),
    "map_empty": ({}, [("CreateMap", [], ["b"], {"key_dtype": 10, "value_dtype": 2})], "b"),
    "cursor_fresh": ({}, [("CreateTreeCursor", [], ["b"], {"fields": ["a", "b:lengths", "b:values"]})], "b"),
    "cursor_read": ({"a": ([0, 1, 2, 3], "int32"), "l": ([1, 2, 0, 1], "int32"), "x": ([0, 1, 2, 3], "float32")},
                    [("CreateTreeCursor", [], ["b"], {"fields": ["a", "b:lengths", "b:values"]}),
                     ("ReadNextBatch", ["b", "a", "l", "x"], ["o1", "o2", "o3"], {"batch_size": 2})], "b"),
}


def _feed(name, values, dtype):
    if dtype == "object":
        workspace.FeedBlob(name, np.array([v.encode() for v in values], dtype=object))
    else:
        workspace.FeedBlob(name, np.array([int(v) for v in values], dtype=dtype))


def main():
    out = {}
    for case, (feeds, ops, blob) in sorted(CASES.items()):
        workspace.ResetWorkspace()
        for name, (values, dtype) in sorted(feeds.items()):
            _feed(name, values, dtype)
        for op_type, ins, outs, args in ops:
            workspace.RunOperatorOnce(core.CreateOperator(op_type, ins, outs, **args))
        first = workspace.SerializeBlob(blob)
        workspace.ResetWorkspace()
        workspace.DeserializeBlob(blob, first)
        out[case] = {"feeds": {k: [str(x) if d == "object" else int(x) for x in v] for k, (v, d) in feeds.items()},
                     "dtypes": {k: d for k, (_, d) in feeds.items()},
                     "ops": [[t, ins, outs, args] for t, ins, outs, args in ops], "blob": blob,
                     "serialized": first.hex(), "reserialized": workspace.SerializeBlob(blob).hex()}
    write_json(os.path.join(OUT, "serialized", "blobs.json"), out)


if __name__ == "__main__":
    main()
