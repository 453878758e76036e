"""An op's category (conv, norm, activation, …), from the Caffe2 source file that defines it.

Caffe2 groups ops by file (``conv_op.cc``, ``layer_norm_op.cc``, ``sgd/adam_op.cc``); the rules
below map those files to the categories the graph colours and search use. Ops without a
schema (most gradient ops) take their forward op's category.
"""
from __future__ import annotations

import re
from functools import cache

from engine.catalogue.facts import facts

#: Every category, in legend order.
CATEGORIES = ("conv", "pool", "norm", "activation", "elementwise", "linear", "reduce", "tensor",
              "sparse", "rnn", "loss", "optimizer", "detection", "quantized", "fill", "control",
              "io", "utility")

# (pattern on the source file path, category): first match wins.
_FILE_RULES: tuple[tuple[str, str], ...] = (
    (r"quantized/|quantization/|fused_rowwise|rowwise_8bit|nbit|byte_weight|quant_decode|half_float"
     r"|fbgemm|int8_gen", "quantized"),
    (r"modules/detectron/(ps_roi|roi_pool|sample_as|upsample|spatial_narrow)", "detection"),
    (r"modules/detectron/", "loss"),
    (r"sgd/|sparse_lp_reg|sparse_normalize|clip_tensor", "optimizer"),
    (r"roi_|bbox|box_with_nms|generate_proposals|collect_and_distribute|heatmap|rmac|batch_permutation"
     r"|ps_roi", "detection"),
    (r"deform_conv|conv|locally_connected|im2col|channel_shuffle", "conv"),
    (r"pool", "pool"),
    (r"norm|batch_norm|moments|channel_stats|channel_backprop|affine_channel|normalize", "norm"),
    (r"relu|sigmoid|tanh|softmax_op|elu_op|selu|swish|mish|gelu|softplus|softsign|glu|logit"
     r"|hard_sigmoid|prelu", "activation"),
    (r"log_op|exp_op", "elementwise"),
    (r"loss|cross_entropy|criterion|accuracy|jsd|perplexity|rank_loss|listwise|h_softmax"
     r"|ctc_|apmeter|margin|l2r", "loss"),
    (r"rnn/|lstm|gru_unit|recurrent|sinusoid|crf_viterbi", "rnn"),
    (r"if_op|while_op|do_op|onnx_while|create_scope|conditional_op|workspace_ops|async_net"
     r"|assert_op|crash", "control"),
    (r"fully_connected|matmul|batch_matmul|tt_linear|elementwise_linear|distance_op|cc_bmm", "linear"),
    (r"segment|lengths|sparse_to_dense|feature_maps|map_ops|one_hot|bucketize|index_hash|ngram"
     r"|key_split|gather_ranges|boolean_|batch_sparse|merge_id|dense_vector_to_id|unsafe_coalesce"
     r"|remove_data_blocks|find_duplicate|partition|pack_segments|sequence_ops|sparse_dropout"
     r"|sparse_itemwise|variable_length|pad_empty|percentile|histogram|piecewise|stump|box_cox"
     r"|weighted_sample|weighted_multi|reservoir|last_n_window|string_ops|unique_ops"
     r"|batch_gather|gather_op|is_empty|dropout", "sparse"),
    (r"reduc|arg_ops|mean_op|lpnorm|summarize|minmax|rowmul|top_k|flexible_top_k", "reduce"),
    (r"filler|given_tensor|fill", "fill"),
    (r"db/|load_save|queue/|dataset|tensor_protos|text_file|counter|atomic|stats|store_ops"
     r"|file_store|communicator|nccl|index_ops|feed_blob|free_op|mem_query|stylizer|data_couple"
     r"|pybind|onnxifi|aten", "io"),
    (r"elementwise|abs_|acos|asin|atan|cos|sin|tan|cbrt|cube|erf|exp_|log|sqr|sqrt|rsqrt|reciprocal"
     r"|pow_|negative|sign|ceil|floor|clip|mod_|scale_|square_root|replace_nan|enforce_finite"
     r"|ensure_clipped|negate|accumulate|mean|sum", "elementwise"),
    (r"reshape|transpose|concat|slice|tile|expand|flatten|shape|cast|copy|pad_op|space_batch"
     r"|order_switch|prepend|numpy_tile|upsample|resize|spatial|squeeze|pack_rnn|reverse_packed"
     r"|batch_to|integral_image|stop_gradient|zero_gradient|alias|ensure_cpu|find_op|copy_rows", "tensor"),
)

# Ops defined in the catch-all files (utility_ops.cc, …): by name.
_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"Fill$|^Range$", "fill"),
    (r"Sum|Max|Min|Mean|Scale|Add|Mul|Div|Sub|Pow|Not|And|Or|Xor|EQ|NE|LT|LE|GT|GE|Where|Sign|Log"
     r"|Exp|Sqrt|Sqr|Abs|Negative|Accumulate|Clip", "elementwise"),
    (r"Gather|Scatter|Lengths|Segment|Sparse|Unique|Nan|Check", "sparse"),
    (r"Print|Alias|Size|Has|Sleep|Count|Wall|Nop|Barrier|Log|Timer|Stat", "io"),
)


@cache
def category(op_type: str) -> str:
    """The category of `op_type` ("utility" when no rule fits; "unknown" for non-Caffe2 ops).

    Examples
    --------
    >>> category("Conv"), category("SpatialBN"), category("Adam"), category("ConvGradient")
    ('conv', 'norm', 'optimizer', 'conv')
    """
    f = facts(op_type)
    if f is None:
        return "unknown"
    if not f.file:
        base = re.sub(r"(Gradient|Grad)(Approx)?$|_ENGINE_\w+$", "", op_type)
        base = re.sub(r"WithMainInput$|_gradient_input$", "", base)
        if base != op_type and facts(base) is not None:
            return category(base)
    path = f.file.removeprefix("caffe2/").removeprefix("operators/")
    for pattern, cat in _FILE_RULES:
        if path and re.search(pattern, path):
            return cat
    for pattern, cat in _NAME_RULES:
        if re.search(pattern, op_type):
            return cat
    return "utility"
