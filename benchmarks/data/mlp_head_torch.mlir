module @module {
  util.global private @__auto.w1 = #flow.parameter.named<"model"::"w1"> : tensor<256x256xf32>
  util.global private @__auto.b1 = #flow.parameter.named<"model"::"b1"> : tensor<256xf32>
  util.global private @__auto.w2 = #flow.parameter.named<"model"::"w2"> : tensor<10x256xf32>
  util.global private @__auto.b2 = #flow.parameter.named<"model"::"b2"> : tensor<10xf32>
  func.func @main(%arg0: !torch.vtensor<[1,256],f32>) -> !torch.vtensor<[1,10],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %__auto.w1 = util.global.load @__auto.w1 : tensor<256x256xf32>
    %0 = torch_c.from_builtin_tensor %__auto.w1 : tensor<256x256xf32> -> !torch.vtensor<[256,256],f32>
    %__auto.b1 = util.global.load @__auto.b1 : tensor<256xf32>
    %1 = torch_c.from_builtin_tensor %__auto.b1 : tensor<256xf32> -> !torch.vtensor<[256],f32>
    %2 = torch.aten.linear %arg0, %0, %1 : !torch.vtensor<[1,256],f32>, !torch.vtensor<[256,256],f32>, !torch.vtensor<[256],f32> -> !torch.vtensor<[1,256],f32>
    %3 = torch.aten.relu %2 : !torch.vtensor<[1,256],f32> -> !torch.vtensor<[1,256],f32>
    %__auto.w2 = util.global.load @__auto.w2 : tensor<10x256xf32>
    %4 = torch_c.from_builtin_tensor %__auto.w2 : tensor<10x256xf32> -> !torch.vtensor<[10,256],f32>
    %__auto.b2 = util.global.load @__auto.b2 : tensor<10xf32>
    %5 = torch_c.from_builtin_tensor %__auto.b2 : tensor<10xf32> -> !torch.vtensor<[10],f32>
    %6 = torch.aten.linear %3, %4, %5 : !torch.vtensor<[1,256],f32>, !torch.vtensor<[10,256],f32>, !torch.vtensor<[10],f32> -> !torch.vtensor<[1,10],f32>
    return %6 : !torch.vtensor<[1,10],f32>
  }
}
