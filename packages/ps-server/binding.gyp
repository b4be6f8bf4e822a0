{
  "targets": [
    {
      "target_name": "rdmajs_ps_kernels",
      "sources": ["native/kernels.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++20", "-O2", "-fvect-cost-model=dynamic", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"]
    }
  ]
}
