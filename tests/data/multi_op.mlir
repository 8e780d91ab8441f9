#map_a = affine_map<(d0, d1, d2) -> (d0, d2)>
#map_bt = affine_map<(d0, d1, d2) -> (d1, d2)>
#map_c = affine_map<(d0, d1, d2) -> (d0, d1)>
module @m {
func.func @mlp(%x: tensor<256x512xf32>, %w: tensor<384x512xf32>, %v: tensor<4x64x32xf32>, %u: tensor<4x32x96xf32>) -> (tensor<256x384xf32>, tensor<4x64x96xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x384xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x384xf32>) -> tensor<256x384xf32>
  %mm = linalg.matmul indexing_maps = [#map_a, #map_bt, #map_c] ins(%x, %w : tensor<256x512xf32>, tensor<384x512xf32>) outs(%f : tensor<256x384xf32>) -> tensor<256x384xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%mm : tensor<256x384xf32>) outs(%e : tensor<256x384xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<256x384xf32>
  %e2 = tensor.empty() : tensor<4x64x96xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<4x64x96xf32>) -> tensor<4x64x96xf32>
  %bmm = linalg.batch_matmul ins(%v, %u : tensor<4x64x32xf32>, tensor<4x32x96xf32>) outs(%f2 : tensor<4x64x96xf32>) -> tensor<4x64x96xf32>
  return %r, %bmm : tensor<256x384xf32>, tensor<4x64x96xf32>
}
func.func @norm(%x: tensor<64x128xf32>) -> tensor<64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x128xf32>) outs(%f : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %sq = arith.mulf %a, %a : f32
    %ad = arith.addf %sq, %o : f32
    linalg.yield %ad : f32
  } -> tensor<64xf32>
  return %s : tensor<64xf32>
}
func.func @conv(%i: tensor<1x34x34x16xf32>, %k: tensor<3x3x16x32xf32>) -> tensor<1x32x32x32xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x32x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%i, %k : tensor<1x34x34x16xf32>, tensor<3x3x16x32xf32>) outs(%f : tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  return %c : tensor<1x32x32x32xf32>
}
}
