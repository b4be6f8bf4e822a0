{
  "variables": {
    "have_ibverbs%": "<!(node -p \"require('fs').existsSync('/usr/include/infiniband/verbs.h')\")"
  },
  "targets": [
    {
      "target_name": "rdmajs_verbs",
      "sources": [
        "native/addon.cc",
        "native/mapping.cc",
        "native/module.cc",
        "native/soft/copy.cc",
        "native/soft/cq.cc",
        "native/soft/device.cc",
        "native/soft/faults.cc",
        "native/soft/link.cc",
        "native/soft/mr.cc",
        "native/soft/qp.cc",
        "native/soft/recv.cc",
        "native/soft/segment.cc",
        "native/soft/send.cc",
        "native/soft_device.cc",
        "native/soft_link.cc",
        "native/soft_memory.cc",
        "native/soft_queues.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "_GNU_SOURCE"],
      "cflags_cc": ["-std=c++20", "-O2", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "libraries": ["-lpthread"],
      "conditions": [
        ["have_ibverbs=='true'", {
          "sources": [
            "native/ibv/api.cc",
            "native/ibv/cq.cc",
            "native/ibv/device.cc",
            "native/ibv/discovery.cc",
            "native/ibv/memory.cc",
            "native/ibv/post.cc",
            "native/ibv/qp.cc",
            "native/ibv/status.cc"
          ],
          "libraries": ["-ldl"]
        }, {
          "sources": ["native/ibv/unavailable.cc"]
        }]
      ]
    }
  ]
}
