module @module {
  func.func @main(%arg0: !torch.vtensor<[2,16,100],f32>, %arg1: !torch.vtensor<[1,16,8,10,12],f32>) -> (!torch.vtensor<[2,16,1],f32>, !torch.vtensor<[1,16,1,1,1],f32>) attributes {torch.assume_strict_symbolic_shapes} {
    %int1 = torch.constant.int 1
    %0 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %1 = torch.aten.adaptive_avg_pool1d %arg0, %0 : !torch.vtensor<[2,16,100],f32>, !torch.list<int> -> !torch.vtensor<[2,16,1],f32>
    %int1_0 = torch.constant.int 1
    %int1_1 = torch.constant.int 1
    %int1_2 = torch.constant.int 1
    %2 = torch.prim.ListConstruct %int1_0, %int1_1, %int1_2 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %3 = torch.aten.adaptive_avg_pool3d %arg1, %2 : !torch.vtensor<[1,16,8,10,12],f32>, !torch.list<int> -> !torch.vtensor<[1,16,1,1,1],f32>
    return %1, %3 : !torch.vtensor<[2,16,1],f32>, !torch.vtensor<[1,16,1,1,1],f32>
  }
}
