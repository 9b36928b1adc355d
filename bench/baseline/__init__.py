"""The floor every figure is compared with: bare Django and one Redis GET."""
