import os

# Tests run on the CPU; keep XLA from grabbing every core of a small CI machine twice.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Four fake CPU devices for the data-parallel tests (must be set before JAX starts).
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")
