module @module {
  func.func @main(%arg0: !torch.vtensor<[?,256],f32>, %arg1: !torch.vtensor<[512,256],f32>, %arg2: !torch.vtensor<[512],f32>, %arg3: !torch.vtensor<[256,512],f32>, %arg4: !torch.vtensor<[256],f32>) -> !torch.vtensor<[?,256],f32> attributes {torch.assume_strict_symbolic_shapes} {
    %0 = torch.aten.linear %arg0, %arg1, %arg2 : !torch.vtensor<[?,256],f32>, !torch.vtensor<[512,256],f32>, !torch.vtensor<[512],f32> -> !torch.vtensor<[?,512],f32>
    %1 = torch.aten.relu %0 : !torch.vtensor<[?,512],f32> -> !torch.vtensor<[?,512],f32>
    %2 = torch.aten.linear %1, %arg3, %arg4 : !torch.vtensor<[?,512],f32>, !torch.vtensor<[256,512],f32>, !torch.vtensor<[256],f32> -> !torch.vtensor<[?,256],f32>
    return %2 : !torch.vtensor<[?,256],f32>
  }
}
