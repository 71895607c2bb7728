"""The stages of the detection recipe (`ebm_jax.recipes.detection`): its data, the
`backbone` stage and the head stages, each a `TrainStage` whose identity holds what its
result depends on (settings, the data's content identity, the seed; never a path).

    <workdir>/data/<split>-<hash>            the generated benchmark (its spec + seed)
    <workdir>/backbone-<hash>                the feature pyramid (checkpoints, metrics)
    <workdir>/head-<method>-m<M>[...]-<hash> one energy head, and its eval.json

Every `cfg` here is the recipe's Config (`ebm_jax.recipes.detection.Config`), which
this module never imports: a recipe imports its stages, never the reverse.
"""

from __future__ import annotations


import numpy as np


def open_data(cfg, ctx):
    """The data (validated: annotations, every image, the detections), with the
    `eval_split` (val or test) as the scored set; the detections must be pre-NMS when
    guided NMS is on."""
    from ebm_jax.data import detection as det_data
    from ebm_jax.data import detection_sets as det
    from ebm_jax.io import content_hash

    if cfg.data == "coco":
        test = cfg.eval_split == "test"
        data = det.open_coco(cfg.coco_root, cfg.test_detections if test else cfg.detections,
                             image_size=cfg.image_size, train_split=cfg.train_split,
                             val_split=cfg.test_split if test else cfg.val_split,
                             digest_cache=ctx.digest_cache)
        where = (f"--config.{'test_detections' if test else 'detections'} "
                 f"{cfg.test_detections if test else cfg.detections}")
    else:
        gen = dict(image_size=cfg.image_size, num_classes=cfg.num_classes,
                   max_objects=cfg.max_objects, min_size=cfg.min_size,
                   annotation_noise=cfg.annotation_noise)
        split, n = ("val", cfg.num_val) if cfg.eval_split == "val" else ("test", cfg.num_test)
        spec = {s: {"split": s, **gen, "num_images": k, "seed": ctx.seed_of("data", s)}
                for s, k in (("train", cfg.num_train), (split, n))}
        detector = {"seed": ctx.seed_of("data", "detector" if split == "val"
                                        else "detector-test"),
                    "iou_range": list(cfg.detector_iou),
                    "false_positives": cfg.false_positives,
                    "candidates": cfg.detector_candidates,
                    "confusion": cfg.detector_confusion}
        root = cfg.data_root or ctx.workdir / "data"
        ctx.log(f"generated data under {root} (spec {content_hash(spec, 8)})")
        data = det.open_generated(root, train=spec["train"], val=spec[split],
                                  detector=detector)
        where = ("the simulated detector's boxes (--config.detector_candidates="
                 f"{cfg.detector_candidates:g})")
    if cfg.guided_nms:  # before any training
        det_data.check_pre_nms(data.detections, cfg.nms_iou, where)
    return data


def backbone_stage(cfg, ctx, data):
    """The `backbone` stage (resumes); returns (its identity, its StageFigures, the
    frozen FeaturePyramid)."""
    import optax

    from ebm_jax import detection as det
    from ebm_jax.models.fpn import dense_loss
    from ebm_jax.train import create_train_state, make_train_step, merge_model
    from ebm_jax.train.schedules import warmup_cosine
    from ebm_jax.train.stages import TrainStage

    identity = {"data": data.identity["train"], "widths": list(cfg.widths),
                "channels": cfg.channels, "steps": cfg.backbone_steps,
                "batch": cfg.backbone_batch, "lr": cfg.backbone_lr, "seed": ctx.seed}
    every = max(1, cfg.backbone_steps // 10)
    stage = TrainStage("backbone", identity, cfg.backbone_steps, log_every=every,
                       save_every=every * 5)
    model = det.build_backbone(widths=cfg.widths, channels=cfg.channels,
                               num_classes=data.train.num_classes,
                               key=stage.key(ctx, "init"))
    opt = optax.adamw(warmup_cosine(cfg.backbone_lr, cfg.backbone_steps), weight_decay=1e-4)
    graphdef, state = create_train_state(model, opt, stage.key(ctx, "train"))
    step = make_train_step(graphdef, dense_loss, opt, ctx.mesh)
    batches = det.backbone_batches(data.train, model.backbone.strides,
                                   batch=cfg.backbone_batch,
                                   seed=ctx.seed_of("backbone", "batches"))
    ctx.log("stage backbone")
    state, figures = stage.run(ctx, state, step, batches)
    return stage.full_identity, figures, merge_model(graphdef, state).backbone


def head_stage(cfg, ctx, spec, data, features, backbone_id):
    """A head stage (resumes); returns (stage, its identity, figures, head)."""
    import optax

    from ebm_jax import detection as det
    from ebm_jax.energy.boxes import check_detection_batch, make_detection_loss
    from ebm_jax.train import create_train_state, make_train_step, merge_model
    from ebm_jax.train.schedules import warmup_step_decay
    from ebm_jax.train.stages import TrainStage

    settings = {k: getattr(cfg, k) for k in (
        "hidden", "pool_size", "canonical_size", "head_steps", "boxes_per_batch",
        "learning_rate", "weight_decay", "warmup_steps", "grad_clip")}
    if cfg.pool_method != "dense":  # (dense stages keep the identity they had)
        settings["pool_method"] = cfg.pool_method
    identity = {"backbone": backbone_id, "method": spec.method,
                "num_samples": spec.num_samples, "hyperparameters": spec.hp,
                "head": settings, "seed": ctx.seed}
    every = max(1, cfg.head_steps // 20)
    stage = TrainStage(spec.name, identity, cfg.head_steps, log_every=every,
                       save_every=every * 10)
    train = data.train
    head = det.build_head(channels=cfg.channels, num_classes=train.num_classes,
                          hidden=cfg.hidden, pool_size=cfg.pool_size,
                          strides=features.strides, canonical_size=cfg.canonical_size,
                          pool_method=cfg.pool_method,
                          key=ctx.key("head", "init"))  # the same start for every head
    opt = optax.chain(
        *([optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip else []),
        optax.add_decayed_weights(cfg.weight_decay),
        optax.sgd(warmup_step_decay(cfg.learning_rate, cfg.head_steps, cfg.warmup_steps),
                  momentum=0.9))
    graphdef, state = create_train_state(head, opt, stage.key(ctx, "train"))
    loss_fn = make_detection_loss(spec.method, spec.num_samples, **spec.hp)
    step = make_train_step(graphdef, loss_fn, opt, ctx.mesh)
    index = det.box_index(train)
    check_detection_batch(train.boxes[index[:, 0], index[:, 1]],
                          train.classes[index[:, 0], index[:, 1]],
                          np.ones(len(index), bool), train.num_classes)
    batches = det.box_batches(train, features, boxes_per_batch=cfg.boxes_per_batch,
                              seed=ctx.seed_of("head", "batches"))  # the same boxes
    state, figures = stage.run(ctx, state, step, batches)
    return stage, stage.full_identity, figures, merge_model(graphdef, state)
