// Built instead of the ibverbs adapter when libibverbs headers were missing at build time.
#include "../addon.h"

namespace rdmajs {

void register_ibverbs(Napi::Env env, Napi::Object exports) {
  exports.Set("ibvStatus", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
                Napi::Object o = Napi::Object::New(info.Env());
                o.Set("compiled", false);
                o.Set("devices", Napi::Array::New(info.Env()));
                o.Set("reason",
                      "the addon was built without libibverbs headers (install libibverbs-dev, then rebuild with "
                      "`pnpm build`)");
                return o;
              }));
}

}  // namespace rdmajs
