# lit configuration for Shardflow's FileCheck tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "Shardflow"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs", "unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.shardflow_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.shardflow_tools_dir, append_path=True)
llvm_config.with_environment(
    "PYTHONPATH", os.path.join(config.shardflow_src_root, "python"), append_path=True)
config.substitutions.append(("%sf-python", config.python_executable))
config.substitutions.append(("%shardflow_src", config.shardflow_src_root))
config.substitutions.append(("%shardflow_obj", config.shardflow_obj_root))
llvm_config.add_tool_substitutions(
    ["shard-opt", "FileCheck", "not", "split-file", "count"],
    [config.shardflow_tools_dir, config.llvm_tools_dir])
