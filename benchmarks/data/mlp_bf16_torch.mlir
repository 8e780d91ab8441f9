module @module {
  util.global private @__auto.w1 = #flow.parameter.named<"model"::"w1"> : tensor<1024x512xbf16>
  util.global private @__auto.b1 = #flow.parameter.named<"model"::"b1"> : tensor<1024xbf16>
  util.global private @__auto.w2 = #flow.parameter.named<"model"::"w2"> : tensor<512x1024xbf16>
  util.global private @__auto.b2 = #flow.parameter.named<"model"::"b2"> : tensor<512xbf16>
  func.func @main(%arg0: !torch.vtensor<[128,512],bf16>) -> !torch.vtensor<[128,512],bf16> attributes {torch.assume_strict_symbolic_shapes} {
    %__auto.w1 = util.global.load @__auto.w1 : tensor<1024x512xbf16>
    %0 = torch_c.from_builtin_tensor %__auto.w1 : tensor<1024x512xbf16> -> !torch.vtensor<[1024,512],bf16>
    %__auto.b1 = util.global.load @__auto.b1 : tensor<1024xbf16>
    %1 = torch_c.from_builtin_tensor %__auto.b1 : tensor<1024xbf16> -> !torch.vtensor<[1024],bf16>
    %2 = torch.aten.linear %arg0, %0, %1 : !torch.vtensor<[128,512],bf16>, !torch.vtensor<[1024,512],bf16>, !torch.vtensor<[1024],bf16> -> !torch.vtensor<[128,1024],bf16>
    %3 = torch.aten.relu %2 : !torch.vtensor<[128,1024],bf16> -> !torch.vtensor<[128,1024],bf16>
    %__auto.w2 = util.global.load @__auto.w2 : tensor<512x1024xbf16>
    %4 = torch_c.from_builtin_tensor %__auto.w2 : tensor<512x1024xbf16> -> !torch.vtensor<[512,1024],bf16>
    %__auto.b2 = util.global.load @__auto.b2 : tensor<512xbf16>
    %5 = torch_c.from_builtin_tensor %__auto.b2 : tensor<512xbf16> -> !torch.vtensor<[512],bf16>
    %6 = torch.aten.linear %3, %4, %5 : !torch.vtensor<[128,1024],bf16>, !torch.vtensor<[512,1024],bf16>, !torch.vtensor<[512],bf16> -> !torch.vtensor<[128,512],bf16>
    return %6 : !torch.vtensor<[128,512],bf16>
  }
}
