// IREE 3.13 drops the compilation_info of a batch-1 depthwise convolution on llvm-cpu, as it does
// a batch-1 2-D convolution's (repro_batch1_conv_config_dropped.mlir): the dumped executable
// configuration is IREE's default, not the one below. With batch 2 (replace 1x18 by 2x18 and
// 1x16 by 2x16) the same config is kept.
//
//   iree-compile repro_batch1_depthwise_config_dropped.mlir \
//     --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-llvmcpu-target-cpu=haswell -o /tmp/depthwise.vmfb \
//     --iree-hal-dump-executable-configurations-to=/tmp/configs
//   grep -h lowering_config /tmp/configs/*.mlir   # distribution is not [1, 1, 8, 16, 0, 0]
#config = #iree_codegen.compilation_info<
  lowering_config = #iree_cpu.lowering_config<distribution = [1, 1, 8, 16, 0, 0],
    vector_common_parallel = [1, 1, 4, 8, 0, 0], vector_reduction = [0, 0, 0, 0, 1, 3]>,
  translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<ConvTileAndDecomposeExpert>>>
func.func @depthwise(%input: tensor<1x18x18x32xf32>, %filter: tensor<3x3x32xf32>) -> tensor<1x16x16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x16x16x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x16x16x32xf32>) -> tensor<1x16x16x32xf32>
  %out = linalg.depthwise_conv_2d_nhwc_hwc {compilation_info = #config,
           dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
         ins(%input, %filter : tensor<1x18x18x32xf32>, tensor<3x3x32xf32>)
         outs(%init : tensor<1x16x16x32xf32>) -> tensor<1x16x16x32xf32>
  return %out : tensor<1x16x16x32xf32>
}
