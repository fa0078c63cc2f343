"""Python helpers of Shardflow: test-model generators for the ONNX importer."""
