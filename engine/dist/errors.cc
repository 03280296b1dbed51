#include "engine/dist/errors.h"

namespace engine::dist {

std::string on_rank(int rank, const std::string& what) {
  return "[rank " + std::to_string(rank) + "] " + what;
}

const char* dist_error_kind(const std::exception_ptr& error) {
  if (!error) return nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const Timeout&) {
    return "Timeout";
  } catch (const PeerFailure&) {
    return "PeerFailure";
  } catch (const CollectiveMismatch&) {
    return "CollectiveMismatch";
  } catch (const InvalidArgument&) {
    return "InvalidArgument";
  } catch (const MalformedInput&) {
    return "MalformedInput";
  } catch (const DistError&) {
    return "DistError";
  } catch (...) {
    return nullptr;
  }
}

}  // namespace engine::dist
