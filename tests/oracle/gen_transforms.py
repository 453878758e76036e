"""Transform and memonger goldens: Caffe2's results for tests/oracle/transform_scenarios.py, written
to <out>/transforms/scenarios.json (sorted keys).  Zoo nets are named, never copied.

    cd tests/oracle && PYTHONHASHSEED=0 GLOG_minloglevel=2 ../../.venv-caffe2/bin/python gen_transforms.py ../golden
"""
import json
import os

import caffe2.python._import_c_extension as C
from caffe2.python import core, workspace

from _common import OUT, ZOO, caffe2_pb2
import transform_scenarios

if __name__ == "__main__":
    folder = os.path.join(OUT, "transforms")
    os.makedirs(folder, exist_ok=True)
    result = transform_scenarios.run(C, caffe2_pb2, workspace, core, ZOO)
    with open(os.path.join(folder, "scenarios.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print("transforms: %d small nets, %d conv+bn cases, %d zoo nets"
          % (len(result["passes"]), len(result["conv_bn"]), len(result["zoo"])))
