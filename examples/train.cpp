// A small libtorch model trained on batches that ferry delivers already on the GPU (or the CPU
// when there is none). The data is synthetic: 64 features per sample; the model learns whether
// the first 32 features sum higher than the last 32.
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include <ferry/io/formats/synthetic_source.h>
#include <ferry/stages/standard_pipeline.h>

int main(int argc, char** argv) {
  const uint64_t epochs = argc > 1 ? std::stoull(argv[1]) : 3;

  ferry::SyntheticOptions data{
      .seed = 1, .samples = 32768, .fields = {{.name = "features", .dtype = torch::kFloat, .shape = {64}}}};
  ferry::PipelineOptions options;
  options.batch_size = 256;
  options.epochs = epochs;
  ferry::Pipeline pipeline = ferry::make_pipeline(std::make_shared<ferry::SyntheticSource>(data), options);
  const torch::Device device(pipeline.options().device);

  torch::nn::Sequential model(torch::nn::Linear(64, 128), torch::nn::ReLU(), torch::nn::Linear(128, 2));
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));

  double accuracy = 0;
  for (const ferry::Batch& batch : pipeline) {
    const torch::Tensor& x = batch["features"];  // [256, 64] float32, already on `device`
    const torch::Tensor y = (x.narrow(1, 0, 32).sum(1) > x.narrow(1, 32, 32).sum(1)).to(torch::kLong);
    const torch::Tensor logits = model->forward(x);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    accuracy = logits.argmax(1).eq(y).to(torch::kFloat).mean().item<double>();
    if (batch.index() % 32 == 0) {
      std::printf("epoch %llu batch %3llu  loss %.4f  accuracy %.3f\n", static_cast<unsigned long long>(batch.epoch()),
                  static_cast<unsigned long long>(batch.index()), loss.item<double>(), accuracy);
    }
  }
  std::printf("final accuracy %.3f on %s\n", accuracy, device.str().c_str());
  return 0;
}
