"""Dense products: FC, FCTransposed, MatMul, BatchMatMul."""
from __future__ import annotations

# ---- kernels ----

# ---- gradients ----

# ---- shapes ----
