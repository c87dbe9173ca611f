"""Videos of a policy: ``islab-train play --video`` and training's ``--video-interval``.

Frames come from the env's own ``render()`` (Isaac Lab's ``render_mode="rgb_array"``: our tasks
draw a diagram, ``islab.envs.render``; mjlab's render through MuJoCo). This package turns them
into files: :mod:`islab.video.writer` (MP4 through imageio-ffmpeg, the ``[video]`` extra),
:mod:`islab.video.play_video` (the episodes ``play`` records) and :mod:`islab.video.training`
(rank 0's recorder during training, with TensorBoard and W&B).
"""
