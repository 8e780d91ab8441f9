func.func @main(%a: tensor<500x700xf32>, %b: tensor<700x300xf32>) -> tensor<500x300xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<500x300xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<500x300xf32>) -> tensor<500x300xf32>
  %c = linalg.matmul ins(%a, %b : tensor<500x700xf32>, tensor<700x300xf32>)
                     outs(%init : tensor<500x300xf32>) -> tensor<500x300xf32>
  return %c : tensor<500x300xf32>
}
