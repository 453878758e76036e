"""Nomnigraph goldens: Caffe2's results for tests/oracle/nomnigraph_scenarios.py, written to
<out>/nomnigraph/scenarios.json (sorted keys).  Zoo nets are named, never copied.

    cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_nomnigraph.py ../golden
"""
import json
import os

import caffe2.python._import_c_extension as C

from _common import OUT, ZOO, caffe2_pb2
import nomnigraph_scenarios

if __name__ == "__main__":
    folder = os.path.join(OUT, "nomnigraph")
    os.makedirs(folder, exist_ok=True)
    result = nomnigraph_scenarios.run(C, caffe2_pb2, ZOO)
    with open(os.path.join(folder, "scenarios.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print("nomnigraph: %d zoo nets, %d small scenarios" % (len(result["zoo"]), len(result["small"])))
