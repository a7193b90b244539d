// A training loop over batches that ferry delivers from a YAML config, built against an installed
// ferry with nothing but find_package(ferry) (CMakeLists.txt beside it).
//
//   train_from_yaml CONFIG [key=value ...]     e.g. train_from_yaml train.yaml sampler.epochs=3
//
// The model learns whether a sample's first 32 features sum higher than its last 32.
#include <cstdio>
#include <string>
#include <vector>

#include <ferry/ferry.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG [key=value ...]\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> overrides(argv + 2, argv + argc);
  try {
    ferry::Pipeline pipeline = ferry::load_pipeline(argv[1], overrides);
    const torch::Device device(pipeline.options().device);  // "auto" resolved: cuda:0 or cpu
    std::printf("ferry %s (%s build), batches on %s\n", FERRY_VERSION, FERRY_BUILD_KIND, device.str().c_str());

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
      if (batch.index() % 64 == 0) {
        std::printf("epoch %llu batch %3llu  loss %.4f  accuracy %.3f\n",
                    static_cast<unsigned long long>(batch.epoch()), static_cast<unsigned long long>(batch.index()),
                    loss.item<double>(), accuracy);
      }
    }
    const ferry::PipelineStats stats = pipeline.stats();
    std::printf("%llu batches, %.0f samples/s; final accuracy %.3f\n", static_cast<unsigned long long>(stats.batches),
                static_cast<double>(stats.samples) / stats.elapsed_seconds, accuracy);
    return 0;
  } catch (const ferry::ConfigError& e) {  // every problem, with file:line:column
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // ferry::Error names the stage and the sample
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
