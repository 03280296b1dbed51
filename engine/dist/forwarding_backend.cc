#include "engine/dist/forwarding_backend.h"

namespace engine::dist {

// Each call described as a Call of `kind`, then made on inner by around().
#define ENGINE_DIST_FORWARD_CALL_AS(name, parameters, arguments, description, kind) \
  WorkPtr ForwardingBackend::name parameters {                                      \
    return around(Call{#kind, ENGINE_DIST_UNPARENTHESIZED description},             \
                  [&] { return inner_->name arguments; });                          \
  }
#define ENGINE_DIST_FORWARD_CALL(name, parameters, arguments, description) \
  ENGINE_DIST_FORWARD_CALL_AS(name, parameters, arguments, description, name)
ENGINE_DIST_BACKEND_CALLS(ENGINE_DIST_FORWARD_CALL)
ENGINE_DIST_BACKEND_CALL_FORMS(ENGINE_DIST_FORWARD_CALL_AS)
#undef ENGINE_DIST_FORWARD_CALL
#undef ENGINE_DIST_FORWARD_CALL_AS

}  // namespace engine::dist
