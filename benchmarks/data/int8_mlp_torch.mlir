module @module {
  util.global private @__auto.w1 = #flow.parameter.named<"model"::"w1"> : tensor<512x1024xi8>
  util.global private @__auto.s1 = #flow.parameter.named<"model"::"s1"> : tensor<1024xf32>
  util.global private @__auto.w2 = #flow.parameter.named<"model"::"w2"> : tensor<1024x512xi8>
  util.global private @__auto.s2 = #flow.parameter.named<"model"::"s2"> : tensor<512xf32>
  func.func @main(%arg0: !torch.vtensor<[128,512],si8>) -> !torch.vtensor<[128,512],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %none = torch.constant.none
    %none_0 = torch.constant.none
    %int1 = torch.constant.int 1
    %cpu = torch.constant.device "cpu"
    %int0 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %arg0, %none, %none_0, %int1, %cpu, %int0 : !torch.vtensor<[128,512],si8>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int3 = torch.constant.int 3
    %0 = torch.prims.convert_element_type %arg0, %int3 : !torch.vtensor<[128,512],si8>, !torch.int -> !torch.vtensor<[128,512],si32>
    %__auto.w1 = util.global.load @__auto.w1 : tensor<512x1024xi8>
    %1 = torch_c.from_builtin_tensor %__auto.w1 : tensor<512x1024xi8> -> !torch.vtensor<[512,1024],si8>
    %none_1 = torch.constant.none
    %none_2 = torch.constant.none
    %int1_3 = torch.constant.int 1
    %cpu_4 = torch.constant.device "cpu"
    %int0_5 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %1, %none_1, %none_2, %int1_3, %cpu_4, %int0_5 : !torch.vtensor<[512,1024],si8>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int3_6 = torch.constant.int 3
    %2 = torch.prims.convert_element_type %1, %int3_6 : !torch.vtensor<[512,1024],si8>, !torch.int -> !torch.vtensor<[512,1024],si32>
    %3 = torch.aten.matmul %0, %2 : !torch.vtensor<[128,512],si32>, !torch.vtensor<[512,1024],si32> -> !torch.vtensor<[128,1024],si32>
    %none_7 = torch.constant.none
    %none_8 = torch.constant.none
    %int3_9 = torch.constant.int 3
    %cpu_10 = torch.constant.device "cpu"
    %int0_11 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %3, %none_7, %none_8, %int3_9, %cpu_10, %int0_11 : !torch.vtensor<[128,1024],si32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6 = torch.constant.int 6
    %4 = torch.prims.convert_element_type %3, %int6 : !torch.vtensor<[128,1024],si32>, !torch.int -> !torch.vtensor<[128,1024],f32>
    %__auto.s1 = util.global.load @__auto.s1 : tensor<1024xf32>
    %5 = torch_c.from_builtin_tensor %__auto.s1 : tensor<1024xf32> -> !torch.vtensor<[1024],f32>
    %6 = torch.aten.mul.Tensor %4, %5 : !torch.vtensor<[128,1024],f32>, !torch.vtensor<[1024],f32> -> !torch.vtensor<[128,1024],f32>
    %7 = torch.aten.relu %6 : !torch.vtensor<[128,1024],f32> -> !torch.vtensor<[128,1024],f32>
    %float5.000000e-02 = torch.constant.float 5.000000e-02
    %8 = torch.aten.div.Scalar %7, %float5.000000e-02 : !torch.vtensor<[128,1024],f32>, !torch.float -> !torch.vtensor<[128,1024],f32>
    %9 = torch.aten.round %8 : !torch.vtensor<[128,1024],f32> -> !torch.vtensor<[128,1024],f32>
    %int-128 = torch.constant.int -128
    %int127 = torch.constant.int 127
    %10 = torch.aten.clamp %9, %int-128, %int127 : !torch.vtensor<[128,1024],f32>, !torch.int, !torch.int -> !torch.vtensor<[128,1024],f32>
    %none_12 = torch.constant.none
    %none_13 = torch.constant.none
    %int6_14 = torch.constant.int 6
    %cpu_15 = torch.constant.device "cpu"
    %int0_16 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %10, %none_12, %none_13, %int6_14, %cpu_15, %int0_16 : !torch.vtensor<[128,1024],f32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int1_17 = torch.constant.int 1
    %11 = torch.prims.convert_element_type %10, %int1_17 : !torch.vtensor<[128,1024],f32>, !torch.int -> !torch.vtensor<[128,1024],si8>
    %none_18 = torch.constant.none
    %none_19 = torch.constant.none
    %int1_20 = torch.constant.int 1
    %cpu_21 = torch.constant.device "cpu"
    %int0_22 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %11, %none_18, %none_19, %int1_20, %cpu_21, %int0_22 : !torch.vtensor<[128,1024],si8>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int3_23 = torch.constant.int 3
    %12 = torch.prims.convert_element_type %11, %int3_23 : !torch.vtensor<[128,1024],si8>, !torch.int -> !torch.vtensor<[128,1024],si32>
    %__auto.w2 = util.global.load @__auto.w2 : tensor<1024x512xi8>
    %13 = torch_c.from_builtin_tensor %__auto.w2 : tensor<1024x512xi8> -> !torch.vtensor<[1024,512],si8>
    %none_24 = torch.constant.none
    %none_25 = torch.constant.none
    %int1_26 = torch.constant.int 1
    %cpu_27 = torch.constant.device "cpu"
    %int0_28 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %13, %none_24, %none_25, %int1_26, %cpu_27, %int0_28 : !torch.vtensor<[1024,512],si8>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int3_29 = torch.constant.int 3
    %14 = torch.prims.convert_element_type %13, %int3_29 : !torch.vtensor<[1024,512],si8>, !torch.int -> !torch.vtensor<[1024,512],si32>
    %15 = torch.aten.matmul %12, %14 : !torch.vtensor<[128,1024],si32>, !torch.vtensor<[1024,512],si32> -> !torch.vtensor<[128,512],si32>
    %none_30 = torch.constant.none
    %none_31 = torch.constant.none
    %int3_32 = torch.constant.int 3
    %cpu_33 = torch.constant.device "cpu"
    %int0_34 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %15, %none_30, %none_31, %int3_32, %cpu_33, %int0_34 : !torch.vtensor<[128,512],si32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6_35 = torch.constant.int 6
    %16 = torch.prims.convert_element_type %15, %int6_35 : !torch.vtensor<[128,512],si32>, !torch.int -> !torch.vtensor<[128,512],f32>
    %__auto.s2 = util.global.load @__auto.s2 : tensor<512xf32>
    %17 = torch_c.from_builtin_tensor %__auto.s2 : tensor<512xf32> -> !torch.vtensor<[512],f32>
    %18 = torch.aten.mul.Tensor %16, %17 : !torch.vtensor<[128,512],f32>, !torch.vtensor<[512],f32> -> !torch.vtensor<[128,512],f32>
    return %18 : !torch.vtensor<[128,512],f32>
  }
}
