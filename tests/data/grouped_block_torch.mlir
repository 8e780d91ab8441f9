module @module {
  func.func @main(%arg0: !torch.vtensor<[1,32,16,16],f32>, %arg1: !torch.vtensor<[32,32,1,1],f32>, %arg2: !torch.vtensor<[32],f32>, %arg3: !torch.vtensor<[32,8,3,3],f32>, %arg4: !torch.vtensor<[32],f32>, %arg5: !torch.vtensor<[32,32,1,1],f32>, %arg6: !torch.vtensor<[32],f32>) -> !torch.vtensor<[1,32,16,16],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %int1 = torch.constant.int 1
    %int1_0 = torch.constant.int 1
    %0 = torch.prim.ListConstruct %int1, %int1_0 : (!torch.int, !torch.int) -> !torch.list<int>
    %int0 = torch.constant.int 0
    %int0_1 = torch.constant.int 0
    %1 = torch.prim.ListConstruct %int0, %int0_1 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_2 = torch.constant.int 1
    %int1_3 = torch.constant.int 1
    %2 = torch.prim.ListConstruct %int1_2, %int1_3 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_4 = torch.constant.int 1
    %3 = torch.aten.conv2d %arg0, %arg1, %arg2, %0, %1, %2, %int1_4 : !torch.vtensor<[1,32,16,16],f32>, !torch.vtensor<[32,32,1,1],f32>, !torch.vtensor<[32],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[1,32,16,16],f32>
    %4 = torch.aten.relu %3 : !torch.vtensor<[1,32,16,16],f32> -> !torch.vtensor<[1,32,16,16],f32>
    %int1_5 = torch.constant.int 1
    %int1_6 = torch.constant.int 1
    %5 = torch.prim.ListConstruct %int1_5, %int1_6 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_7 = torch.constant.int 1
    %int1_8 = torch.constant.int 1
    %6 = torch.prim.ListConstruct %int1_7, %int1_8 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_9 = torch.constant.int 1
    %int1_10 = torch.constant.int 1
    %7 = torch.prim.ListConstruct %int1_9, %int1_10 : (!torch.int, !torch.int) -> !torch.list<int>
    %int4 = torch.constant.int 4
    %8 = torch.aten.conv2d %4, %arg3, %arg4, %5, %6, %7, %int4 : !torch.vtensor<[1,32,16,16],f32>, !torch.vtensor<[32,8,3,3],f32>, !torch.vtensor<[32],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[1,32,16,16],f32>
    %9 = torch.aten.relu %8 : !torch.vtensor<[1,32,16,16],f32> -> !torch.vtensor<[1,32,16,16],f32>
    %int1_11 = torch.constant.int 1
    %int1_12 = torch.constant.int 1
    %10 = torch.prim.ListConstruct %int1_11, %int1_12 : (!torch.int, !torch.int) -> !torch.list<int>
    %int0_13 = torch.constant.int 0
    %int0_14 = torch.constant.int 0
    %11 = torch.prim.ListConstruct %int0_13, %int0_14 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_15 = torch.constant.int 1
    %int1_16 = torch.constant.int 1
    %12 = torch.prim.ListConstruct %int1_15, %int1_16 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_17 = torch.constant.int 1
    %13 = torch.aten.conv2d %9, %arg5, %arg6, %10, %11, %12, %int1_17 : !torch.vtensor<[1,32,16,16],f32>, !torch.vtensor<[32,32,1,1],f32>, !torch.vtensor<[32],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[1,32,16,16],f32>
    %int1_18 = torch.constant.int 1
    %14 = torch.aten.add.Tensor %arg0, %13, %int1_18 : !torch.vtensor<[1,32,16,16],f32>, !torch.vtensor<[1,32,16,16],f32>, !torch.int -> !torch.vtensor<[1,32,16,16],f32>
    %15 = torch.aten.relu %14 : !torch.vtensor<[1,32,16,16],f32> -> !torch.vtensor<[1,32,16,16],f32>
    return %15 : !torch.vtensor<[1,32,16,16],f32>
  }
}
