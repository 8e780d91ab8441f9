module @module {
  util.global private @__auto.w1 = #flow.parameter.named<"model"::"w1"> : tensor<384x80x3xf32>
  util.global private @__auto.b1 = #flow.parameter.named<"model"::"b1"> : tensor<384xf32>
  util.global private @__auto.w2 = #flow.parameter.named<"model"::"w2"> : tensor<384x384x3xf32>
  util.global private @__auto.b2 = #flow.parameter.named<"model"::"b2"> : tensor<384xf32>
  func.func @main(%arg0: !torch.vtensor<[1,80,3000],f32>) -> !torch.vtensor<[1,384,1500],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %__auto.w1 = util.global.load @__auto.w1 : tensor<384x80x3xf32>
    %0 = torch_c.from_builtin_tensor %__auto.w1 : tensor<384x80x3xf32> -> !torch.vtensor<[384,80,3],f32>
    %__auto.b1 = util.global.load @__auto.b1 : tensor<384xf32>
    %1 = torch_c.from_builtin_tensor %__auto.b1 : tensor<384xf32> -> !torch.vtensor<[384],f32>
    %int1 = torch.constant.int 1
    %2 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %int1_0 = torch.constant.int 1
    %3 = torch.prim.ListConstruct %int1_0 : (!torch.int) -> !torch.list<int>
    %int1_1 = torch.constant.int 1
    %4 = torch.prim.ListConstruct %int1_1 : (!torch.int) -> !torch.list<int>
    %int1_2 = torch.constant.int 1
    %5 = torch.aten.conv1d %arg0, %0, %1, %2, %3, %4, %int1_2 : !torch.vtensor<[1,80,3000],f32>, !torch.vtensor<[384,80,3],f32>, !torch.vtensor<[384],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[1,384,3000],f32>
    %str = torch.constant.str "none"
    %6 = torch.aten.gelu %5, %str : !torch.vtensor<[1,384,3000],f32>, !torch.str -> !torch.vtensor<[1,384,3000],f32>
    %__auto.w2 = util.global.load @__auto.w2 : tensor<384x384x3xf32>
    %7 = torch_c.from_builtin_tensor %__auto.w2 : tensor<384x384x3xf32> -> !torch.vtensor<[384,384,3],f32>
    %__auto.b2 = util.global.load @__auto.b2 : tensor<384xf32>
    %8 = torch_c.from_builtin_tensor %__auto.b2 : tensor<384xf32> -> !torch.vtensor<[384],f32>
    %int2 = torch.constant.int 2
    %9 = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
    %int1_3 = torch.constant.int 1
    %10 = torch.prim.ListConstruct %int1_3 : (!torch.int) -> !torch.list<int>
    %int1_4 = torch.constant.int 1
    %11 = torch.prim.ListConstruct %int1_4 : (!torch.int) -> !torch.list<int>
    %int1_5 = torch.constant.int 1
    %12 = torch.aten.conv1d %6, %7, %8, %9, %10, %11, %int1_5 : !torch.vtensor<[1,384,3000],f32>, !torch.vtensor<[384,384,3],f32>, !torch.vtensor<[384],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[1,384,1500],f32>
    %str_6 = torch.constant.str "none"
    %13 = torch.aten.gelu %12, %str_6 : !torch.vtensor<[1,384,1500],f32>, !torch.str -> !torch.vtensor<[1,384,1500],f32>
    return %13 : !torch.vtensor<[1,384,1500],f32>
  }
}
