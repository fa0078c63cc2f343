// RUN: shard-opt %s -split-input-file -verify-diagnostics -o /dev/null

// source_type records a conversion at load: from one float type to another.
func.func @same_type() -> memref<4xf32> {
  // expected-error @+1 {{source_type 'f32' must be a float type other than the buffer's 'f32'}}
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, source_type = f32} : memref<4xf32>
  return %w : memref<4xf32>
}

// -----

func.func @integer_buffer() -> memref<4xi32> {
  // expected-error @+1 {{source_type 'f32' must be a float type other than the buffer's 'i32'}}
  %w = rt.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, source_type = f32} : memref<4xi32>
  return %w : memref<4xi32>
}
