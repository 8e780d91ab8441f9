// A depthwise convolution as PyTorch exports it (NCHW, after IREE's input phase): padded 3x3
// depthwise, its bias, ReLU; weights as arguments. IREE runs the depthwise as scalar code.
func.func @main(%x: tensor<1x64x56x56xf32>, %k: tensor<64x3x3xf32>, %b: tensor<64xf32>) -> tensor<1x64x56x56xf32> {
  %zero = arith.constant 0.0 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %h: index, %w: index):
    tensor.yield %zero : f32
  } : tensor<1x64x56x56xf32> to tensor<1x64x58x58xf32>
  %empty = tensor.empty() : tensor<1x64x56x56xf32>
  %bias = linalg.broadcast ins(%b : tensor<64xf32>) outs(%empty : tensor<1x64x56x56xf32>) dimensions = [0, 2, 3]
  %conv = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %k : tensor<1x64x58x58xf32>, tensor<64x3x3xf32>) outs(%bias : tensor<1x64x56x56xf32>) -> tensor<1x64x56x56xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%conv : tensor<1x64x56x56xf32>) outs(%empty : tensor<1x64x56x56xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x64x56x56xf32>
  return %relu : tensor<1x64x56x56xf32>
}
