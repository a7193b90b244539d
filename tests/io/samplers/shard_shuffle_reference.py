#!/usr/bin/env python3
"""An independent model of ferry::ShardShuffleSampler (io/samplers/shard_shuffle_sampler.h), written from its
class comment with a plain list buffer rather than the C++ in-place one. It prints the values that
ShardShuffleSampler.PinsTheOrderSoEveryMachineAgrees pins; run it after a deliberate change to the draws.
"""

M = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
DOMAIN = 0x7368617264736866  # "shardshf"


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def absorb(state, word):
    return mix64((state + GOLDEN + mix64(word)) & M)


class SplitMix64:
    def __init__(self, state):
        self.state = state

    def below(self, bound):
        """Uniform in [0, bound): reject draws below 2^64 mod bound."""
        threshold = (1 << 64) % bound
        while True:
            self.state = (self.state + GOLDEN) & M
            r = mix64(self.state)
            if r >= threshold:
                return r % bound


def order(sizes, seed, buffer_size, shuffle_shards, epoch):
    rng = SplitMix64(absorb(absorb(absorb(0, DOMAIN), seed), epoch))
    begin = [sum(sizes[:s]) for s in range(len(sizes))]
    shards = list(range(len(sizes)))
    if shuffle_shards:
        for i in range(len(sizes) - 1, 0, -1):
            j = rng.below(i + 1)
            shards[i], shards[j] = shards[j], shards[i]
    stream = [k for s in shards for k in range(begin[s], begin[s] + sizes[s])]
    capacity = min(buffer_size, len(stream))
    if capacity == 1:
        return stream
    buffer, out = stream[:capacity], []
    for incoming in stream[capacity:]:
        j = rng.below(capacity)
        out.append(buffer[j])
        buffer[j] = incoming
    while buffer:
        j = rng.below(len(buffer))
        out.append(buffer[j])
        buffer[j] = buffer[-1]
        buffer.pop()
    return out


def fingerprint(values):
    h = 0xCBF29CE484222325
    for v in values:
        h = ((h ^ v) * 0x100000001B3) & M
    return h


if __name__ == "__main__":
    sizes = [5, 0, 3, 8, 4, 6, 2]
    print(order(sizes, 42, 1, True, 3))
    print(order(sizes, 42, 4, True, 3))
    print(order(sizes, 7, 100, False, 0))
    many = [s * 37 % 101 for s in range(200)]
    print(fingerprint(order(many, 123456789, 1000, True, 9)))
