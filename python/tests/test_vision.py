"""Vision data as models need it: torchvision's resize/crop/flip recipes (checked pixel by pixel against
Pillow, and torchvision's v2 transforms where torchvision is installed), box targets that follow the
image, CMYK JPEGs, WebP, alternative extensions and optional members of tar shards."""

import io
import json
import subprocess
import tarfile

import numpy as np
import pytest
import torch

import ferry

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

try:
    import torchvision.transforms.v2.functional as tv  # the reference where it is installed
except ImportError:  # Debian 12 has no torchvision: Pillow, which torchvision's PIL path is, stands in
    tv = None

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def photo(rng, height, width):
    """Smooth shapes with some texture: like a photo, unlike noise, so that resampling matters."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(0.01, 0.12), rng.uniform(0.01, 0.12), rng.uniform(0, 6.28)
        channels.append(127 + 100 * np.sin(fx * x + phase) * np.cos(fy * y + c))
    image = np.stack(channels, axis=-1) + rng.normal(0, 12, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def encoded(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def write_shard(path, samples):
    """samples: a list of {extension: bytes}, keyed 000000, 000001, ..."""
    with tarfile.open(path, "w") as tar:
        for key, members in enumerate(samples):
            for extension, data in members.items():
                info = tarfile.TarInfo(f"{key:06d}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def make_images(tmp_path, count=24, seed=3):
    rng = np.random.default_rng(seed)
    images, samples = [], []
    for i in range(count):
        height, width = int(rng.integers(40, 260)), int(rng.integers(40, 260))
        pixels = photo(rng, height, width)
        data = encoded(Image.fromarray(pixels), "JPEG", quality=92)
        images.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))  # the decoded image
        samples.append({"jpg": data, "cls": str(i).encode()})
    shard = tmp_path / "images.tar"
    write_shard(shard, samples)
    return shard, images


def run(config):
    """Every batch's fields as CPU tensors, in order."""
    config = {"batch_size": 8, "sampler": {"shuffle": False, "seed": 11}, "decode": {"threads": 2},
              "transfer": {"device": DEVICE}, **config}
    out = []
    with ferry.Pipeline(config) as pipeline:
        for _ in range(pipeline.epochs):
            for batch in pipeline:
                out.append({name: [t.cpu() for t in value] if isinstance(value, list) else value.cpu()
                            for name, value in batch.items()})
    return out


def samples_of(batches, field):
    return [row for batch in batches for row in batch[field]]


FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def reference(image, window, interpolation):
    """torchvision's resized crop of `image` for the window ferry reports: v2's on the uint8 tensor
    where torchvision is installed, else Pillow's resize with the same box (torchvision's PIL path)."""
    top, left, height, width, flip, _, _, out_h, out_w = [float(v) for v in window]
    out_h, out_w = int(out_h), int(out_w)
    if tv is not None and top == int(top) and left == int(left) and height == int(height) and width == int(width):
        tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
        mode = tv.InterpolationMode.BILINEAR if interpolation == "bilinear" else tv.InterpolationMode.BICUBIC
        made = tv.resized_crop(tensor, int(top), int(left), int(height), int(width), [out_h, out_w],
                               interpolation=mode, antialias=True)
        made = made.permute(1, 2, 0).numpy()
    else:  # as torchvision's PIL path: crop, then resize
        region = Image.fromarray(image).crop((int(left), int(top), int(left + width), int(top + height)))
        made = np.asarray(region.resize((out_w, out_h), FILTERS[interpolation]))
    return made[:, ::-1] if flip else made


def agreement(pairs):
    """Mean absolute difference and the share of pixels within 2 levels, over every (ours, theirs)."""
    diffs = np.concatenate([np.abs(a.astype(np.int32) - b.astype(np.int32)).ravel() for a, b in pairs])
    return diffs.mean(), (diffs <= 2).mean(), diffs.max()


def tar_config(shard, image):
    return {"source": {"kind": "tar", "shards": [str(shard)], "members": [
        {"name": "image", "extension": "jpg", "decoder": "jpeg", **image},
        {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]}}


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_the_validation_recipe_is_torchvisions_resize_then_center_crop(tmp_path, interpolation):
    shard, images = make_images(tmp_path)
    batches = run(tar_config(shard, {"shape": [48, 40, 3], "resize_shorter": 52, "crop": "center",
                                     "interpolation": interpolation, "window": True}))
    pairs = []
    for label, got, window in zip(samples_of(batches, "label"), samples_of(batches, "image"),
                                  samples_of(batches, "image_window")):
        image = images[int(label)]
        height, width = image.shape[:2]
        # torchvision: Resize(52) of the whole image, then CenterCrop((48, 40)) with its rounding.
        if height <= width:
            size = (52, 52 * width // height)
        else:
            size = (52 * height // width, 52)
        resized = np.asarray(Image.fromarray(image).resize((size[1], size[0]), FILTERS[interpolation]))
        top, left = int(round((size[0] - 48) / 2.0)), int(round((size[1] - 40) / 2.0))
        expected = resized[top:top + 48, left:left + 40]
        pairs.append((got.numpy(), expected))
        assert window[5:].tolist() == [height, width, 48, 40]
    mean, within, worst = agreement(pairs)
    print(f"validation recipe, {interpolation}, {DEVICE}: mean |diff| {mean:.4f}, within 2 levels {within:.5%}, "
          f"max {worst}")
    assert mean <= 0.5 and within >= 0.999


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_random_resized_crops_and_flips_are_torchvisions_for_the_window_each_sample_reports(tmp_path, interpolation):
    shard, images = make_images(tmp_path, count=32, seed=5)
    batches = run(tar_config(shard, {"shape": [32, 32, 3], "crop": "random_resized", "scale": [0.1, 1.0],
                                     "flip": 0.5, "interpolation": interpolation, "window": True}))
    pairs, flips, windows = [], 0, set()
    for label, got, window in zip(samples_of(batches, "label"), samples_of(batches, "image"),
                                  samples_of(batches, "image_window")):
        image = images[int(label)]
        top, left, height, width = [int(v) for v in window[:4].tolist()]
        # drawn from the whole image, as RandomResizedCrop draws
        assert 0 <= top and top + height <= image.shape[0] and 0 <= left and left + width <= image.shape[1]
        assert window[5:7].tolist() == list(image.shape[:2])
        flips += int(window[4])
        windows.add((top, left, height, width))
        pairs.append((got.numpy(), reference(image, window, interpolation)))
    mean, within, worst = agreement(pairs)
    print(f"random resized crop, {interpolation}, {DEVICE}: mean |diff| {mean:.4f}, within 2 levels {within:.5%}, "
          f"max {worst}")
    assert mean <= 0.5 and within >= 0.999
    assert 0 < flips < len(pairs) and len(windows) > len(pairs) // 2


@pytest.mark.skipif(not torch.cuda.is_available() or tv is None, reason="needs a GPU and torchvision")
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("recipe", ["validation", "random_resized"])
def test_the_gpu_decoders_images_are_torchvisions_on_the_same_gpu_decoded_images(tmp_path, recipe, interpolation):
    from torchvision.io import decode_jpeg
    shard, _ = make_images(tmp_path, count=32, seed=9)
    with tarfile.open(shard) as tar:
        files = {int(m.name.split(".")[0]): tar.extractfile(m).read() for m in tar if m.name.endswith(".jpg")}
    image = ({"shape": [48, 40, 3], "resize_shorter": 52, "crop": "center"} if recipe == "validation" else
             {"shape": [40, 40, 3], "crop": "random_resized", "flip": 0.5})
    batches = run(tar_config(shard, {**image, "window": True, "device": "gpu", "interpolation": interpolation}))
    mode = tv.InterpolationMode.BILINEAR if interpolation == "bilinear" else tv.InterpolationMode.BICUBIC
    pairs = []
    for label, got, window in zip(samples_of(batches, "label"), samples_of(batches, "image"),
                                  samples_of(batches, "image_window")):
        # The same decoded pixels: nvJPEG's, through torchvision's GPU decoder.
        decoded = decode_jpeg(torch.frombuffer(bytearray(files[int(label)]), dtype=torch.uint8), device="cuda")
        top, left, height, width, flip, _, _, out_h, out_w = window.tolist()
        if recipe == "validation":
            made = tv.center_crop(tv.resize(decoded, [52], interpolation=mode, antialias=True),
                                  [int(out_h), int(out_w)])
        else:
            made = tv.resized_crop(decoded, int(top), int(left), int(height), int(width), [int(out_h), int(out_w)],
                                   interpolation=mode, antialias=True)
            made = made.flip(-1) if flip else made
        pairs.append((got.numpy(), made.permute(1, 2, 0).cpu().numpy()))
    mean, within, worst = agreement(pairs)
    print(f"GPU decoder, {recipe}, {interpolation}: mean |diff| {mean:.4f}, within 2 levels {within:.5%}, "
          f"max {worst}")
    assert mean <= 0.5 and within >= 0.999


def test_crops_and_flips_repeat_on_every_run_and_change_with_the_epoch(tmp_path):
    shard, _ = make_images(tmp_path, count=16)
    config = {**tar_config(shard, {"shape": [24, 24, 3], "crop": "random_resized", "flip": 0.5, "window": True}),
              "sampler": {"shuffle": False, "seed": 4, "epochs": 2}}
    first, second = run(config), run(config)
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(first, second))
    epoch0 = torch.cat([b["image_window"] for b in first[:2]])
    epoch1 = torch.cat([b["image_window"] for b in first[2:]])
    assert not torch.equal(epoch0, epoch1)


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_boxes_follow_the_crop_and_flip_and_the_labels_follow_the_boxes(tmp_path, decode):
    if decode == "gpu" and not torch.cuda.is_available():
        pytest.skip("no GPU: the GPU decoder's windows are checked on a GPU machine")
    rng = np.random.default_rng(8)
    samples, truth = [], []
    for i in range(40):
        height, width = int(rng.integers(60, 200)), int(rng.integers(60, 200))
        count = int(rng.integers(0, 7))
        x1, y1 = rng.uniform(0, width - 2, count), rng.uniform(0, height - 2, count)
        x2, y2 = x1 + rng.uniform(1, width / 2, count), y1 + rng.uniform(1, height / 2, count)
        boxes = np.stack([x1, y1, np.minimum(x2, width), np.minimum(y2, height)], axis=1).astype(np.float32)
        labels = rng.integers(0, 80, count)
        truth.append((boxes.reshape(-1, 4), labels))
        target = json.dumps({"boxes": boxes.tolist(), "labels": labels.tolist(), "note": "ignored", "x": None})
        samples.append({"jpg": encoded(Image.fromarray(photo(rng, height, width)), "JPEG"),
                        "json": target.encode(), "cls": str(i).encode()})
    shard = tmp_path / "detection.tar"
    write_shard(shard, samples)
    config = {"source": {"kind": "tar", "shards": [str(shard)], "members": [
        {"name": "image", "extension": "jpg", "decoder": "jpeg", "shape": [64, 64, 3], "crop": "random_resized",
         "scale": [0.2, 1.0], "flip": 0.5, "window": True, "device": decode},
        {"name": "boxes", "extension": "json", "decoder": "json", "select": "/boxes", "dtype": "float32",
         "shape": [None, 4], "max_length": 8},
        {"name": "labels", "extension": "json", "decoder": "json", "select": "/labels", "dtype": "int64",
         "shape": [None], "max_length": 8},
        {"name": "index", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]},
        "transforms": [{"kind": "boxes", "window": "image_window", "boxes": ["boxes"], "follow": ["labels"],
                        "min_visible": 0.25}]}
    batches = run(config)
    kept_total = dropped_total = 0
    for batch in batches:
        for row in range(batch["index"].shape[0]):
            boxes, labels = truth[int(batch["index"][row])]
            top, left, height, width, flip, _, _, out_h, out_w = batch["image_window"][row].double().tolist()
            x1 = (boxes[:, 0] - left) * out_w / width
            x2 = (boxes[:, 2] - left) * out_w / width
            y1 = (boxes[:, 1] - top) * out_h / height
            y2 = (boxes[:, 3] - top) * out_h / height
            area = (x2 - x1) * (y2 - y1)
            cx1, cx2 = np.clip(x1, 0, out_w), np.clip(x2, 0, out_w)
            cy1, cy2 = np.clip(y1, 0, out_h), np.clip(y2, 0, out_h)
            inside = np.maximum(cx2 - cx1, 0) * np.maximum(cy2 - cy1, 0)
            keep = (inside > 0) & (inside >= 0.25 * area)
            if flip:
                cx1, cx2 = out_w - cx2, out_w - cx1
            expected = np.stack([cx1, cy1, cx2, cy2], axis=1)[keep]
            count = int(batch["boxes_lengths"][row])
            assert count == int(keep.sum())
            assert int(batch["labels_lengths"][row]) == count
            got = batch["boxes"][row][:count].numpy()
            np.testing.assert_allclose(got, expected, atol=1e-3)
            assert batch["labels"][row][:count].tolist() == labels[keep].tolist()
            kept_total += count
            dropped_total += len(boxes) - count
    assert kept_total > 0 and dropped_total > 0


def test_cmyk_and_ycck_jpegs_decode_to_rgb_as_pillow_converts_them(tmp_path):
    rng = np.random.default_rng(2)
    samples, expected = [], []
    for i in range(6):
        cmyk = Image.fromarray(rng.integers(0, 256, (37, 53, 4), dtype=np.uint8), mode="CMYK")
        data = encoded(cmyk, "JPEG", quality=90)
        expected.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        samples.append({"jpg": data, "cls": str(i).encode()})
    write_shard(tmp_path / "cmyk.tar", samples)
    batches = run(tar_config(tmp_path / "cmyk.tar", {"shape": [37, 53, 3]}))
    for label, got in zip(samples_of(batches, "label"), samples_of(batches, "image")):
        np.testing.assert_array_equal(got.numpy(), expected[int(label)])


def test_webp_and_alternative_extensions_decode_with_the_first_one_a_sample_has(tmp_path):
    from PIL import features
    if not features.check("webp"):
        pytest.skip("this Pillow cannot write WebP")
    rng = np.random.default_rng(6)
    samples, expected = [], []
    for i in range(12):
        pixels = photo(rng, 30, 34)
        kind = ["jpg", "png", "webp", "jpeg"][i % 4]
        if kind == "webp":
            data = encoded(Image.fromarray(pixels), "WEBP", lossless=True)
        elif kind == "png":
            data = encoded(Image.fromarray(pixels), "PNG")
        else:
            data = encoded(Image.fromarray(pixels), "JPEG")
        expected.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        members = {kind: data, "cls": str(i).encode()}
        if kind == "jpg" and i % 8 == 0:  # a second image: the first extension listed wins
            members["webp"] = encoded(Image.fromarray(255 - pixels), "WEBP", lossless=True)
        samples.append(members)
    write_shard(tmp_path / "mixed.tar", samples)
    config = {"source": {"kind": "tar", "shards": [str(tmp_path / "mixed.tar")], "members": [
        {"name": "image", "extension": ["jpg", "jpeg", "png", "webp"], "decoder": "image", "shape": [30, 34, 3]},
        {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]}}
    batches = run(config)
    got = {int(label): image.numpy() for label, image in zip(samples_of(batches, "label"),
                                                              samples_of(batches, "image"))}
    assert sorted(got) == list(range(12))
    for i, image in got.items():
        np.testing.assert_array_equal(image, expected[i])


def test_an_optional_image_a_sample_lacks_is_zeros_with_a_flag_and_validate_agrees(tmp_path, cli):
    rng = np.random.default_rng(9)
    samples, expected = [], []
    for i in range(10):
        pixels = photo(rng, 20, 22)
        members = {"cls": str(i).encode()}
        if i % 3 != 0:
            members["png"] = encoded(Image.fromarray(pixels), "PNG")
            expected.append(pixels)
        else:
            expected.append(None)
        samples.append(members)
    write_shard(tmp_path / "optional.tar", samples)
    config = {"source": {"kind": "tar", "shards": [str(tmp_path / "optional.tar")], "members": [
        {"name": "image", "extension": "png", "decoder": "png", "shape": [20, 22, 3], "optional": True},
        {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]}}
    config_file = tmp_path / "optional.yaml"
    config_file.write_text(json.dumps({**config, "batch_size": 4, "transfer": {"device": "cpu"}}))
    checked = subprocess.run([cli, "validate", str(config_file)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    batches = run(config)
    labels, images = samples_of(batches, "label"), samples_of(batches, "image")
    present = samples_of(batches, "image_present")
    assert len(labels) == 10
    for label, image, flag in zip(labels, images, present):
        want = expected[int(label)]
        assert bool(flag) == (want is not None)
        np.testing.assert_array_equal(image.numpy(), want if want is not None else np.zeros((20, 22, 3), np.uint8))


def make_folder(root, rng, count=12):
    """root/<class>/<n>.png of random sizes; returns {relative path: (pixels, class index)}."""
    made = {}
    for i in range(count):
        cls = ["cat", "dog", "eel"][i % 3]
        (root / cls).mkdir(parents=True, exist_ok=True)
        pixels = photo(rng, int(rng.integers(9, 70)), int(rng.integers(9, 70)))
        Image.fromarray(pixels).save(root / cls / f"{i:03d}.png")
        made[f"{cls}/{i:03d}.png"] = (pixels, i % 3)
    return made


def test_images_of_their_own_size_arrive_as_lists_of_views_of_one_buffer_with_keys_and_class_names(tmp_path):
    made = make_folder(tmp_path / "folder", np.random.default_rng(12))
    config = {"source": {"kind": "image_folder", "root": str(tmp_path / "folder"), "extensions": ["png"],
                         "image": {"decoder": "png", "shape": [None, None, 3], "max_pixels": 70 * 70}},
              "collate": {"lists": ["image"], "host": ["label"]}, "batch_size": 5,
              "sampler": {"shuffle": True, "seed": 3}, "decode": {"threads": 2}, "transfer": {"device": DEVICE}}
    seen = set()
    with ferry.Pipeline(config) as pipeline:
        assert pipeline.class_names == ["cat", "dog", "eel"]
        for batch in pipeline:
            images, keys = batch["image"], batch.sample_keys
            assert isinstance(images, list) and len(images) == len(keys) == batch["label"].shape[0]
            assert batch["label"].device.type == "cpu"  # collate.host: stays on the host
            storages = {image.storage().data_ptr() for image in images}
            assert len(storages) == 1  # views of the batch's one buffer
            for image, key, label in zip(images, keys, batch["label"].tolist()):
                pixels, cls = made[key]
                assert label == cls
                assert str(image.device).startswith(DEVICE)
                np.testing.assert_array_equal(image.cpu().numpy(), pixels)
                seen.add(key)
    assert seen == set(made)


def test_resized_images_of_their_own_size_and_box_lists(tmp_path):
    rng = np.random.default_rng(13)
    samples, originals, truth = [], [], []
    for i in range(10):
        height, width = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        pixels = photo(rng, height, width)
        count = int(rng.integers(0, 4))
        boxes = rng.uniform(0, 25, (count, 4)).astype(np.float32)
        truth.append(boxes)
        originals.append(pixels)
        samples.append({"png": encoded(Image.fromarray(pixels), "PNG"), "cls": str(i).encode(),
                        "json": json.dumps({"boxes": boxes.tolist()}).encode()})
    write_shard(tmp_path / "sized.tar", samples)
    config = {"source": {"kind": "tar", "shards": [str(tmp_path / "sized.tar")], "members": [
        {"name": "image", "extension": "png", "decoder": "png", "shape": [None, None, 3], "resize_shorter": 24,
         "max_pixels": 24 * 96},
        {"name": "boxes", "extension": "json", "decoder": "json", "select": "/boxes", "dtype": "float32",
         "shape": [None, 4], "max_length": 4},
        {"name": "index", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]},
        "collate": {"lists": ["image", "boxes"]}, "batch_size": 4}
    for batch in run(config):
        for index, image, boxes in zip(batch["index"].tolist(), batch["image"], batch["boxes"]):
            pixels = originals[index]
            height, width = pixels.shape[:2]
            size = (24, 24 * width // height) if height <= width else (24 * height // width, 24)
            expected = np.asarray(Image.fromarray(pixels).resize((size[1], size[0]), Image.BILINEAR))
            np.testing.assert_array_equal(image.numpy(), expected)
            np.testing.assert_array_equal(boxes.numpy(), truth[index])


def test_fields_that_neither_stack_nor_pad_are_refused_until_listed_and_lists_need_no_cache(tmp_path):
    make_folder(tmp_path / "folder", np.random.default_rng(14), count=3)
    source = {"kind": "image_folder", "root": str(tmp_path / "folder"), "extensions": ["png"],
              "image": {"decoder": "png", "shape": [None, None, 3], "max_pixels": 4900}}
    with pytest.raises(ferry.Error, match=r"varies in a size other than its first.*collate.lists: \[image\]"):
        ferry.Pipeline({"source": source, "transfer": {"device": "cpu"}})
    with pytest.raises(ferry.Error, match="collate.lists: the samples have no field 'picture'"):
        ferry.Pipeline({"source": source, "collate": {"lists": ["image", "picture"]}, "transfer": {"device": "cpu"}})
    with pytest.raises(ferry.Error, match="dataset cache does not keep"):
        ferry.Pipeline({"source": source, "collate": {"lists": ["image"]}, "cache": {"memory": "host"},
                        "transfer": {"device": "cpu"}})


def test_tar_samples_say_their_keys_and_a_member_may_stay_on_the_host(tmp_path):
    shard, _ = make_images(tmp_path, count=6)
    config = tar_config(shard, {"shape": [16, 16, 3], "resize_shorter": 16})
    config["source"]["members"][1]["device"] = "host"  # the label: a CPU tensor whatever the batch's device
    with ferry.Pipeline({**config, "batch_size": 4, "sampler": {"shuffle": True, "seed": 2},
                         "transfer": {"device": DEVICE}}) as pipeline:
        for batch in pipeline:
            assert batch["label"].device.type == "cpu"
            assert str(batch["image"].device).startswith(DEVICE)
            assert batch.sample_keys == [f"{shard}:{int(label):06d}" for label in batch["label"]]
            assert pipeline.class_names == []
