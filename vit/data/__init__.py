"""The data sets: what each one is, how it is read, and how the trainer varies it.

- specs.py: one `DatasetSpec` per data set (classes, normalisation, layout style, defaults).
- loading.py: a split as in-memory tensors (`load_split`), from raw IDX files, torchvision or a folder.
- folders.py: image folders in torchvision's ImageFolder layout, decoded once and cached.
- affine.py: batched random-affine augmentation and random erasing.
- trivial_augment.py: TrivialAugment (Müller & Hutter 2021) for photos.
- negatives.py: synthetic drawings that are not digits, for outlier exposure.
- examples.py: the sample drawings and scenes the app offers, made from pen strokes here.
"""
