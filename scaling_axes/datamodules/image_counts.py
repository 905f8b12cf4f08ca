"""How many training images each image corpus holds: the planner's epoch arithmetic reads them without importing the
image data module (Lightning, torchvision), which only training needs."""

IMAGENET_TRAIN_IMAGES = 1_281_167
EMBEDDED_TRAIN_IMAGES = 4_500  # the digits not in every tenth place (those are validation)
