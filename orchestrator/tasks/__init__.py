"""Harbor-format task folders, read and checked on the host before any container starts.

`task.py` loads a folder (`load_task`, `Task`) and `schema.py` models its `task.toml`; the
rest are the loader's rules: a safe walk of the folder (`tree`), Harbor's size strings
(`sizes`) and `${VAR}` templates (`envvars`), the features refused by name (`unsupported`), the
near-miss keys warned about (`near_misses`) and the images a task starts from (`base_images`).
"""
