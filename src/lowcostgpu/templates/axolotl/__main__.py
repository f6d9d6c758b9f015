import sys

from lowcostgpu.templates.axolotl import main

sys.exit(main())
