"""The model: what a Caffe2 net is made of, as data (op defs, op-type sets, scopes, SSA versions, model files).

Everything here reads, builds or writes protos; nothing runs an op.  ``opdef`` builds and reads
``OperatorDef``, ``optypes`` holds the op-type sets every layer shares, ``scope`` the thread-local
name/device scope, ``ssa`` blob versions, ``modelio`` the model files (predict + init + value_info).

May import: nothing.
"""
