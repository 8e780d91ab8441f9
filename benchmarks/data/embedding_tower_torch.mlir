module @module {
  util.global private @__auto.table = #flow.parameter.named<"model"::"table"> : tensor<10000x64xf32>
  util.global private @__auto.w1 = #flow.parameter.named<"model"::"w1"> : tensor<256x64xf32>
  util.global private @__auto.b1 = #flow.parameter.named<"model"::"b1"> : tensor<256xf32>
  util.global private @__auto.w2 = #flow.parameter.named<"model"::"w2"> : tensor<1x256xf32>
  util.global private @__auto.b2 = #flow.parameter.named<"model"::"b2"> : tensor<1xf32>
  func.func @main(%arg0: !torch.vtensor<[32,8],si64>) -> !torch.vtensor<[32,1],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %__auto.table = util.global.load @__auto.table : tensor<10000x64xf32>
    %0 = torch_c.from_builtin_tensor %__auto.table : tensor<10000x64xf32> -> !torch.vtensor<[10000,64],f32>
    %int-1 = torch.constant.int -1
    %false = torch.constant.bool false
    %false_0 = torch.constant.bool false
    %1 = torch.aten.embedding %0, %arg0, %int-1, %false, %false_0 : !torch.vtensor<[10000,64],f32>, !torch.vtensor<[32,8],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[32,8,64],f32>
    %int1 = torch.constant.int 1
    %2 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %false_1 = torch.constant.bool false
    %none = torch.constant.none
    %3 = torch.aten.mean.dim %1, %2, %false_1, %none : !torch.vtensor<[32,8,64],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[32,64],f32>
    %__auto.w1 = util.global.load @__auto.w1 : tensor<256x64xf32>
    %4 = torch_c.from_builtin_tensor %__auto.w1 : tensor<256x64xf32> -> !torch.vtensor<[256,64],f32>
    %__auto.b1 = util.global.load @__auto.b1 : tensor<256xf32>
    %5 = torch_c.from_builtin_tensor %__auto.b1 : tensor<256xf32> -> !torch.vtensor<[256],f32>
    %6 = torch.aten.linear %3, %4, %5 : !torch.vtensor<[32,64],f32>, !torch.vtensor<[256,64],f32>, !torch.vtensor<[256],f32> -> !torch.vtensor<[32,256],f32>
    %7 = torch.aten.relu %6 : !torch.vtensor<[32,256],f32> -> !torch.vtensor<[32,256],f32>
    %__auto.w2 = util.global.load @__auto.w2 : tensor<1x256xf32>
    %8 = torch_c.from_builtin_tensor %__auto.w2 : tensor<1x256xf32> -> !torch.vtensor<[1,256],f32>
    %__auto.b2 = util.global.load @__auto.b2 : tensor<1xf32>
    %9 = torch_c.from_builtin_tensor %__auto.b2 : tensor<1xf32> -> !torch.vtensor<[1],f32>
    %10 = torch.aten.linear %7, %8, %9 : !torch.vtensor<[32,256],f32>, !torch.vtensor<[1,256],f32>, !torch.vtensor<[1],f32> -> !torch.vtensor<[32,1],f32>
    return %10 : !torch.vtensor<[32,1],f32>
  }
}
