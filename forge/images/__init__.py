"""Sandbox images, built here from Debian packages (no image registry is needed or used): what
each image holds and is called (:mod:`forge.images.tags`), building them
(:mod:`forge.images.builder`), and the images of tasks that bring their own Dockerfile
(:mod:`forge.images.task`)."""
