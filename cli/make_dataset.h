#pragma once

#include <string_view>
#include <vector>

namespace ferry::cli {

/// `ferry make-dataset KIND OUT [options]`: writes a small dataset to try ferry on, for the demo
/// configs, the tests and the benchmarks (generated, so no large binaries live in the repository).
///
///   tokens OUT      a Megatron-LM indexed dataset, OUT.bin + OUT.idx
///                   [--documents N] [--seed S] [--vocab V] [--dtype uint16|int32]
///   tar OUT_DIR     WebDataset shards OUT_DIR/shard-000000.tar ...: per sample <key>.jpg (an RGB
///                   JPEG) then <key>.cls (the label as decimal text)
///                   [--samples N] [--shards S] [--image-size N|HxW] [--classes C] [--seed S] [--quality Q]
///   npy OUT_DIR     the same shards with <key>.npy (float32 [64], .npy 1.0) then <key>.cls
///                   [--samples N] [--shards S] [--classes C] [--seed S]
///   images OUT_DIR  torchvision ImageFolder: OUT_DIR/class-000/000000.jpg ...
///                   [--samples N] [--image-size N|HxW] [--classes C] [--seed S] [--quality Q]
///
/// Defaults: 1000 samples, 4 shards, 256x256 images, 10 classes, seed 0, quality 90. The key of
/// sample k is k as 6 decimal digits ("%06d"; more digits from a million samples on). Its label is
/// k % classes, in every kind. Shard s holds samples [s*(N/S) + min(s, N%S), ...): consecutive, the
/// first N%S shards one sample more. An image kind's class folders are class-%03d (more digits past
/// 1000 classes, so that their sorted order is the label order torchvision gives), one per class
/// that has a sample. The content of sample k depends only on (seed, k) (see synthetic_image.h):
/// the same arguments give the same bytes, whatever the thread count.
///
/// OUT_DIR must be a new or empty folder (created with its parents); OUT (tokens) must not hold a
/// dataset yet (neither OUT.bin nor OUT.idx exists). Every file is written as
/// `<name>.partial` and renamed into place when whole. Samples are made on all cores (oneTBB) and
/// written in order. Prints one summary line on stdout. Returns the exit status; throws ferry::Error
/// for I/O failures (naming the path) and std::invalid_argument for bad usage, before writing anything.
int make_dataset(const std::vector<std::string_view>& args);

}  // namespace ferry::cli
