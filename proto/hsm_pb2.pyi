from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeProto(_message.Message):
    __slots__ = ("children", "word_ids", "offset", "name", "scores")
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    WORD_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    children: _containers.RepeatedCompositeFieldContainer[NodeProto]
    word_ids: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    name: str
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, children: _Optional[_Iterable[_Union[NodeProto, _Mapping]]] = ..., word_ids: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., name: _Optional[str] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class TreeProto(_message.Message):
    __slots__ = ("root_node",)
    ROOT_NODE_FIELD_NUMBER: _ClassVar[int]
    root_node: NodeProto
    def __init__(self, root_node: _Optional[_Union[NodeProto, _Mapping]] = ...) -> None: ...

class HierarchyProto(_message.Message):
    __slots__ = ("size", "paths")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    size: int
    paths: _containers.RepeatedCompositeFieldContainer[PathProto]
    def __init__(self, size: _Optional[int] = ..., paths: _Optional[_Iterable[_Union[PathProto, _Mapping]]] = ...) -> None: ...

class PathProto(_message.Message):
    __slots__ = ("word_id", "path_nodes")
    WORD_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_NODES_FIELD_NUMBER: _ClassVar[int]
    word_id: int
    path_nodes: _containers.RepeatedCompositeFieldContainer[PathNodeProto]
    def __init__(self, word_id: _Optional[int] = ..., path_nodes: _Optional[_Iterable[_Union[PathNodeProto, _Mapping]]] = ...) -> None: ...

class PathNodeProto(_message.Message):
    __slots__ = ("index", "length", "target")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    index: int
    length: int
    target: int
    def __init__(self, index: _Optional[int] = ..., length: _Optional[int] = ..., target: _Optional[int] = ...) -> None: ...
