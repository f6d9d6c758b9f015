"""The `lowcostgpu` command line."""
