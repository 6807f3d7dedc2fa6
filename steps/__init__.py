"""Runtime step code: one module per pipeline step, each runnable as `python -m steps.<name>`.

Imports no hera. The same modules run in the cluster's containers and in the local executor.
"""

from steps.runtime import noise

noise.install()
