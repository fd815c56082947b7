"""Serving: the Policy deployment, engines, wire protocols and the shared HTTP app."""
