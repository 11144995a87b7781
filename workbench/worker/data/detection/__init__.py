"""Object detection data: COCO (and the seeded split where the files define none), synthetic shapes, one
line per bad annotation, and the batches torchvision's detectors take (a list of images, a list of target
dicts). Worker side; never imports Qt."""
