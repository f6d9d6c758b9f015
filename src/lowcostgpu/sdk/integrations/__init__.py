"""Framework integrations: Hugging Face Trainer and PyTorch Lightning callbacks.

Import the submodule you need (`lowcostgpu.sdk.integrations.hf`, `...lightning`); this package
itself imports no framework, so `import lowcostgpu.sdk` stays cheap without the `ml` extra.
"""

from lowcostgpu.sdk.integrations._common import EXIT_INTERRUPTED

__all__ = ["EXIT_INTERRUPTED"]
