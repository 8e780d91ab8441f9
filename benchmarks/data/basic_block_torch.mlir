module @module {
  func.func @main(%arg0: !torch.vtensor<[2,64,28,28],f32>, %arg1: !torch.vtensor<[64,64,3,3],f32>, %arg2: !torch.vtensor<[64],f32>, %arg3: !torch.vtensor<[64,64,3,3],f32>, %arg4: !torch.vtensor<[64],f32>) -> !torch.vtensor<[2,64,28,28],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %int1 = torch.constant.int 1
    %int1_0 = torch.constant.int 1
    %0 = torch.prim.ListConstruct %int1, %int1_0 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_1 = torch.constant.int 1
    %int1_2 = torch.constant.int 1
    %1 = torch.prim.ListConstruct %int1_1, %int1_2 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_3 = torch.constant.int 1
    %int1_4 = torch.constant.int 1
    %2 = torch.prim.ListConstruct %int1_3, %int1_4 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_5 = torch.constant.int 1
    %3 = torch.aten.conv2d %arg0, %arg1, %arg2, %0, %1, %2, %int1_5 : !torch.vtensor<[2,64,28,28],f32>, !torch.vtensor<[64,64,3,3],f32>, !torch.vtensor<[64],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[2,64,28,28],f32>
    %4 = torch.aten.relu %3 : !torch.vtensor<[2,64,28,28],f32> -> !torch.vtensor<[2,64,28,28],f32>
    %int1_6 = torch.constant.int 1
    %int1_7 = torch.constant.int 1
    %5 = torch.prim.ListConstruct %int1_6, %int1_7 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_8 = torch.constant.int 1
    %int1_9 = torch.constant.int 1
    %6 = torch.prim.ListConstruct %int1_8, %int1_9 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_10 = torch.constant.int 1
    %int1_11 = torch.constant.int 1
    %7 = torch.prim.ListConstruct %int1_10, %int1_11 : (!torch.int, !torch.int) -> !torch.list<int>
    %int1_12 = torch.constant.int 1
    %8 = torch.aten.conv2d %4, %arg3, %arg4, %5, %6, %7, %int1_12 : !torch.vtensor<[2,64,28,28],f32>, !torch.vtensor<[64,64,3,3],f32>, !torch.vtensor<[64],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[2,64,28,28],f32>
    %int1_13 = torch.constant.int 1
    %9 = torch.aten.add.Tensor %8, %arg0, %int1_13 : !torch.vtensor<[2,64,28,28],f32>, !torch.vtensor<[2,64,28,28],f32>, !torch.int -> !torch.vtensor<[2,64,28,28],f32>
    %10 = torch.aten.relu %9 : !torch.vtensor<[2,64,28,28],f32> -> !torch.vtensor<[2,64,28,28],f32>
    return %10 : !torch.vtensor<[2,64,28,28],f32>
  }
}
