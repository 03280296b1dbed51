#include "engine/dist/forwarding_backend.h"

namespace engine::dist {

WorkPtr ForwardingBackend::all_reduce(at::Tensor& tensor, ReduceOp op) {
  return around({"all_reduce", &tensor, op}, [&] { return inner_->all_reduce(tensor, op); });
}

WorkPtr ForwardingBackend::broadcast(at::Tensor& tensor, int root) {
  return around({"broadcast", &tensor, std::nullopt, root},
                [&] { return inner_->broadcast(tensor, root); });
}

WorkPtr ForwardingBackend::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  return around({"reduce", &tensor, op, root}, [&] { return inner_->reduce(tensor, root, op); });
}

WorkPtr ForwardingBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  return around({"all_gather", &input}, [&] { return inner_->all_gather(outputs, input); });
}

WorkPtr ForwardingBackend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  return around({"all_gather", &input},
                [&] { return inner_->all_gather_into_tensor(output, input); });
}

WorkPtr ForwardingBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                  int root) {
  return around({"gather", &input, std::nullopt, root},
                [&] { return inner_->gather(outputs, input, root); });
}

WorkPtr ForwardingBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                   int root) {
  return around({"scatter", &output, std::nullopt, root},
                [&] { return inner_->scatter(output, inputs, root); });
}

WorkPtr ForwardingBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                          ReduceOp op) {
  return around({"reduce_scatter", &output, op},
                [&] { return inner_->reduce_scatter(output, inputs, op); });
}

WorkPtr ForwardingBackend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                                 ReduceOp op) {
  return around({"reduce_scatter", &output, op},
                [&] { return inner_->reduce_scatter_tensor(output, input, op); });
}

WorkPtr ForwardingBackend::all_to_all(std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& inputs) {
  const at::Tensor none;
  return around({"all_to_all", inputs.empty() ? &none : &inputs[0]},
                [&] { return inner_->all_to_all(outputs, inputs); });
}

WorkPtr ForwardingBackend::barrier() {
  const at::Tensor none;
  return around({"barrier", &none}, [&] { return inner_->barrier(); });
}

WorkPtr ForwardingBackend::send(const at::Tensor& tensor, int dst, int tag) {
  return around({"send", &tensor, std::nullopt, -1, dst},
                [&] { return inner_->send(tensor, dst, tag); });
}

WorkPtr ForwardingBackend::recv(at::Tensor& tensor, int src, int tag) {
  return around({"recv", &tensor, std::nullopt, -1, src},
                [&] { return inner_->recv(tensor, src, tag); });
}

}  // namespace engine::dist
