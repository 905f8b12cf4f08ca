"""The Tokenformer paper's tables and figures; `progressive` and `vit_setup` hold what several share."""
