"""Configuration dataclasses of the world model; saved as JSON beside the weights.

Every constructor argument of the autoencoder and the DiT lives here, so a checkpoint directory
(``config.json`` + ``model.safetensors``) rebuilds exactly the module that wrote it.  Derived sizes
(tokens per frame, head dim, latent size) are properties, never literals elsewhere.

The defaults are the shipped model (``neuralsim/assets/world_model``): 64x64 views -> 16x16x4 latents (diffusers
``AutoencoderKL``, channels 16/32/64, no mid attention; a decoder with one ResNet per level and a 32-wide reference
head), DiT patch 4 -> 16 tokens per view, 48 per frame, 4 blocks x 192 wide, 4 heads (3.9 M parameters), trained on
the gripper command and the action adapter's replay of the arm, run with a 32-frame window.  The DiT's size suits
batch-1 inference on a CPU, where per-op overhead, i.e. depth, dominates (docs/FIDELITY.md has its throughput).

Presets (``preset(name)``): ``default`` (the defaults) and ``tiny``, the tests' model: 16x16 views, 8x8x4 latents,
4 tokens per view, a 2-block 32-wide DiT, with the full decoder, no reference head and the recorded conditioning;
``default_grounded`` and ``tiny_grounded`` are the same with ``dit.grounding="projected"``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

#: The fixed discrete rectified-flow schedule t_1..t_S (t_0 = 0 is implicit), S = 4.
DEFAULT_SCHEDULE: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)

#: Number of raw conditioning numbers per frame: flange xyz (3) + extrinsic XYZ Euler (3) + gripper (1).
COND_DIM = 7

#: Numbers of one object's state: position xyz [m] + orientation as a wxyz quaternion (w >= 0).
OBJECT_DIM = 7

#: Config format version written into every config.json.  Version 1 configs load (:meth:`WorldModelConfig.from_dict`
#: upgrades them); version 2 dropped the retired options of :data:`RETIRED`.
FORMAT_VERSION = 2

#: Values of :attr:`WorldModelConfig.gripper_conditioning`.
GRIPPER_CONDITIONINGS = ("measured", "command")

#: Values of :attr:`DiTConfig.grounding`: ``"none"`` (the per-frame condition only, for cameras that are not
#: calibrated) or ``"projected"`` (also per-token features of where the hand projects in each view).
GROUNDINGS = ("none", "projected")
CONDITION_FEATURES = ("raw", "normalised", "fourier")

#: Values of :attr:`WorldModelConfig.arm_conditioning`.
ARM_CONDITIONINGS = ("measured", "replay")


@dataclass
class AutoencoderConfig:
    """Per-view image autoencoder (diffusers ``AutoencoderKL``)."""

    image_size: int = 64
    """Height = width of one camera view in pixels."""
    block_out_channels: tuple[int, ...] = (16, 32, 64)
    """Channels per resolution level; ``len - 1`` downsamplings by 2."""
    layers_per_block: int = 1
    """ResNet layers per level of the encoder (diffusers' decoder has one more per level)."""
    decoder_layers_per_block: int | None = 0
    """The decoder's own ``layers_per_block`` (None: the same as the encoder's).  0 gives one ResNet per level
    instead of two, a faster decoder; ``neuralsim model edit --decoder-layers-per-block`` rebuilds a trained one."""
    latent_channels: int = 4
    """Channels of one view's latent."""
    norm_num_groups: int = 16
    """GroupNorm groups (must divide every entry of ``block_out_channels``)."""
    kl_weight: float = 1e-6
    """Weight of the KL term when training the autoencoder."""
    reference_head_channels: int = 32
    """Width of the reference head (0: none).  The head refines each decoded view with the episode's first
    (true) view, pixel for pixel: :class:`~neuralsim.world_model.autoencoder.ReferenceHead`."""

    def __post_init__(self) -> None:
        self.block_out_channels = tuple(int(c) for c in self.block_out_channels)
        bad = [c for c in self.block_out_channels if c % self.norm_num_groups]
        if bad:
            raise ValueError(
                f"norm_num_groups={self.norm_num_groups} must divide every block_out_channels entry, "
                f"got {self.block_out_channels}"
            )
        if self.decoder_layers_per_block is not None:
            self.decoder_layers_per_block = int(self.decoder_layers_per_block)
            if self.decoder_layers_per_block < 0:
                raise ValueError(f"decoder_layers_per_block must be >= 0, got {self.decoder_layers_per_block}")
        self.reference_head_channels = int(self.reference_head_channels)
        if self.reference_head_channels < 0:
            raise ValueError(f"reference_head_channels must be >= 0 (0: no head), got {self.reference_head_channels}")
        if self.image_size % self.downsample:
            raise ValueError(f"image_size={self.image_size} is not divisible by the downsampling {self.downsample}")

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def decoder_depth(self) -> int:
        """The decoder's ``layers_per_block`` (it builds ``decoder_depth + 1`` ResNets per level)."""
        return self.layers_per_block if self.decoder_layers_per_block is None else self.decoder_layers_per_block

    def encoder_fields(self) -> dict:
        """Every field but the decoder's: equal for two autoencoders whose latents mean the same."""
        d = dataclasses.asdict(self)
        d.pop("decoder_layers_per_block")
        d.pop("reference_head_channels")
        return d

    @property
    def latent_size(self) -> int:
        """Height = width of one view's latent."""
        return self.image_size // self.downsample


@dataclass
class DiTConfig:
    """Causal video DiT over the latents of the three views."""

    latent_channels: int = 4
    """Channels of one view's latent (copied from the autoencoder)."""
    latent_size: int = 16
    """Height = width of one view's latent."""
    num_views: int = 3
    """Camera views per time step (``neuralsim.episode.VIEW_NAMES``)."""
    patch_size: int = 4
    """Latent patch side; tokens per view = (latent_size / patch_size) ** 2."""
    dim: int = 192
    """Transformer width."""
    depth: int = 4
    """Number of blocks (spatial attention, temporal attention, MLP each)."""
    num_heads: int = 4
    """Attention heads; head_dim = dim / num_heads (must be even for RoPE)."""
    mlp_ratio: float = 4.0
    """MLP hidden width / dim."""
    cond_dim: int = COND_DIM
    """Raw conditioning numbers per frame (pose xyz + Euler XYZ + gripper)."""
    rope_theta: float = 10000.0
    """RoPE base for the temporal attention."""
    freq_dim: int = 128
    """Sinusoidal features of the noise level before its MLP."""
    grounding: str = "none"
    """Where the robot is in each view: ``"none"`` -- only the per-frame condition (cameras that are not calibrated)
    -- or ``"projected"`` -- also, per token, the tool point and fingertips projected through that view's camera,
    relative to the token's pixels (:mod:`neuralsim.world_model.grounding`), embedded and added to the tokens."""
    geometry: dict | None = None
    """With ``grounding="projected"``: the cameras and hand points the projection uses
    (:func:`~neuralsim.world_model.grounding.scene_geometry`, its ``scene`` key the scene it came from); None: the
    model's scene's, filled in by :class:`WorldModelConfig`."""
    condition_features: str = "raw"
    """What the per-frame condition's MLP reads: ``"raw"`` -- the pose in metres and sin/cos of its angles, with the
    gripper; ``"normalised"`` -- each of those standardised by the training data's mean/std (fitted at the first DiT
    stage); ``"fourier"`` -- standardised and with sin/cos at five octaves
    (:class:`~neuralsim.world_model.dit.ConditionEmbedding`), so that a centimetre of hand motion is not a
    thousandth of the DiT's conditioning."""
    num_objects: int = 0
    """K, the movable objects whose state each frame carries (0: none, pixels only).  With K > 0 every frame has K
    object tokens after its image tokens, each embedding one object's normalised pose (xyz + wxyz quaternion, w >= 0)
    and its slot, denoised with the frame under the same objective and fed back in rollouts
    (:class:`~neuralsim.world_model.dit.ObjectEmbedding`); training data must record the poses
    (``ground_truth.object_pose``)."""

    def __post_init__(self) -> None:
        if self.patch_size < 1 or self.latent_size % self.patch_size:
            raise ValueError(f"patch_size={self.patch_size} must be >= 1 and divide latent_size={self.latent_size}")
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ValueError(f"dim={self.dim} / num_heads={self.num_heads} must be an even integer head dim")
        if self.cond_dim != COND_DIM:
            raise ValueError(f"cond_dim must be {COND_DIM} (xyz, Euler XYZ, gripper), got {self.cond_dim}")
        if self.grounding not in GROUNDINGS:
            raise ValueError(f"grounding must be one of {GROUNDINGS}, got {self.grounding!r}")
        if self.grounding == "none":
            if self.geometry is not None:
                raise ValueError("geometry is only used with grounding='projected'; leave it None")
        else:
            if self.num_views != 3:
                raise ValueError(f"grounding {self.grounding!r} needs the 3 SimDROID/DROID views, got "
                                 f"num_views={self.num_views}")
            if self.geometry is not None:
                from .grounding import check_geometry

                check_geometry(self.geometry)
        if self.condition_features not in CONDITION_FEATURES:
            raise ValueError(f"condition_features must be one of {CONDITION_FEATURES}, got {self.condition_features!r}")
        if isinstance(self.num_objects, bool) or not isinstance(self.num_objects, int) or self.num_objects < 0:
            raise ValueError(f"num_objects must be an integer >= 0 (0: no object state), got {self.num_objects!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def tokens_per_view(self) -> int:
        return (self.latent_size // self.patch_size) ** 2

    @property
    def image_tokens_per_frame(self) -> int:
        """Tokens of a frame's views: the first tokens of every frame."""
        return self.num_views * self.tokens_per_view

    @property
    def tokens_per_frame(self) -> int:
        """Every token of a frame: its image tokens, then its ``num_objects`` object tokens."""
        return self.image_tokens_per_frame + self.num_objects

    @property
    def patch_dim(self) -> int:
        return self.latent_channels * self.patch_size**2


@dataclass
class WorldModelConfig:
    """Everything :class:`~neuralsim.world_model.model.WorldModel` needs to rebuild itself."""

    autoencoder: AutoencoderConfig = field(default_factory=AutoencoderConfig)
    dit: DiTConfig = field(default_factory=DiTConfig)
    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    """Noise levels t_1 < ... < t_S = 1 used at inference and by the discrete objectives."""
    clip_length: int = 16
    """Frames per training clip (frame 0 is the clean context)."""
    window: int = 32
    """Default inference window W: frames a query sees, itself included (the shipped model's is twice its
    training clip; docs/FIDELITY.md compares windows)."""
    num_sink: int = 0
    """Default number of sink frames (the first frames of an episode, always kept)."""
    denoising_steps: int | None = None
    """Default denoising passes per generated frame at inference: 1..S of the trained levels, evenly spaced and
    ending at 1 (:func:`neuralsim.envs.neural_droid.denoising_schedule`); None: all S.  Like ``window``, an
    inference default that the env's ``denoising_steps`` argument overrides."""
    gripper_conditioning: str = "command"
    """What the 7th conditioning entry was trained on: ``"command"`` -- the gripper command through the action
    adapter's lag (:func:`neuralsim.envs.adapter.gripper_trajectory`), the signal NeuralDROID gives it at run time
    (RoboWorld conditions on the command too) -- or ``"measured"`` -- the recorded gripper position, which an object
    in the fingers stops (~0.35 around a SimDROID cube), so that in the env a measured model reads every closed
    grasp as an empty one."""
    arm_conditioning: str = "replay"
    """What the six pose entries were trained on: ``"replay"`` -- forward kinematics of the action adapter's replay
    of the episode's recorded actions from its first state (:func:`neuralsim.envs.adapter.arm_trajectory`), the
    pose NeuralDROID computes at run time -- or ``"measured"`` -- forward kinematics of the recorded joints.  The
    adapter knows no contacts: where the table or a pushed cube holds the real arm back, the replay runs on, and a
    measured model driven there has never seen such a pose."""
    scene: str = "classic"
    """The SimDROID scene the weights were trained on (:data:`neuralsim.envs.scene.SCENES`; the trainer sets it
    from the data's ``generation.scene``): NeuralDROID starts from that scene's episode set, and its ground-truth
    twin is that scene's SimDROID (``"classic"``: ``SimDROID-v0``, ``"legible"``: ``SimDROID-v1``)."""
    recipe: dict[str, Any] = field(default_factory=dict)
    """Free-form record of the training that made the weights (objective, steps, data...)."""
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.autoencoder, dict):
            self.autoencoder = AutoencoderConfig(**self.autoencoder)
        if isinstance(self.dit, dict):
            self.dit = DiTConfig(**self.dit)
        self.schedule = tuple(float(t) for t in self.schedule)
        s = self.schedule
        if not s or any(b <= a for a, b in zip((0.0,) + s, s)) or abs(s[-1] - 1.0) > 1e-9:
            raise ValueError(f"schedule must be strictly increasing in (0, 1] and end at 1.0, got {s}")
        from neuralsim.envs.scene import SCENES

        if self.scene not in SCENES:
            raise ValueError(f"scene must be one of {sorted(SCENES)}, got {self.scene!r}")
        if self.dit.latent_channels != self.autoencoder.latent_channels:
            raise ValueError(
                f"dit.latent_channels={self.dit.latent_channels} != autoencoder.latent_channels="
                f"{self.autoencoder.latent_channels}"
            )
        if self.dit.grounding != "none" and self.dit.geometry is None:
            from .grounding import scene_geometry

            self.dit.geometry = scene_geometry(self.scene)
        if self.dit.latent_size != self.autoencoder.latent_size:
            raise ValueError(
                f"dit.latent_size={self.dit.latent_size} != autoencoder latent size {self.autoencoder.latent_size}"
            )
        if self.clip_length < 2:
            raise ValueError(f"clip_length must be >= 2 (one context + one generated frame), got {self.clip_length}")
        if self.window < 1 or not 0 <= self.num_sink < self.window:
            raise ValueError(f"need window >= 1 and 0 <= num_sink < window, got window={self.window}, "
                             f"num_sink={self.num_sink}")
        if self.denoising_steps is not None and (isinstance(self.denoising_steps, bool)
                                                 or not isinstance(self.denoising_steps, int)
                                                 or not 1 <= self.denoising_steps <= len(self.schedule)):
            raise ValueError(f"denoising_steps must be None or an integer in 1..{len(self.schedule)} (the trained "
                             f"levels {self.schedule}), got {self.denoising_steps!r}")
        if self.gripper_conditioning not in GRIPPER_CONDITIONINGS:
            raise ValueError(f"gripper_conditioning must be one of {GRIPPER_CONDITIONINGS}, got "
                             f"{self.gripper_conditioning!r}")
        if self.arm_conditioning not in ARM_CONDITIONINGS:
            raise ValueError(f"arm_conditioning must be one of {ARM_CONDITIONINGS}, got {self.arm_conditioning!r}")
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not this version's {FORMAT_VERSION}; read an "
                             "older config with WorldModelConfig.from_dict, which upgrades it")

    @property
    def num_steps(self) -> int:
        """S, the number of denoising passes per generated frame."""
        return len(self.schedule)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data; an ungrounded DiT's ``grounding`` and ``geometry``, a DiT without object
        state's ``num_objects`` and a raw condition's ``condition_features`` are left out, so its config.json is
        what it was before those options existed (and older versions read it)."""
        d = dataclasses.asdict(self)
        if d["dit"]["grounding"] == "none":
            del d["dit"]["grounding"], d["dit"]["geometry"]
        if d["dit"]["num_objects"] == 0:
            del d["dit"]["num_objects"]
        if d["dit"]["condition_features"] == "raw":
            del d["dit"]["condition_features"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorldModelConfig":
        """The config a ``config.json`` dict describes, of this format or of format 1.

        A format-1 dict is upgraded: a key it lacks takes the value it had in format 1 (:data:`FORMAT_1_DEFAULTS`,
        where the defaults have changed since), and each retired option (:data:`RETIRED`) is dropped if it holds its
        "off" value; any other value of one raises a ValueError naming the option.
        """
        d = dict(d)
        version = d.pop("format_version", 1)
        if version not in (1, FORMAT_VERSION):
            raise ValueError(f"config format_version {version!r} is not supported (this version of neuralsim reads 1 "
                             f"and {FORMAT_VERSION})")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown WorldModelConfig fields {unknown}; known fields: {sorted(known)}")
        sections = {"": d, "autoencoder": dict(d.pop("autoencoder", {})), "dit": dict(d.pop("dit", {}))}
        if version == 1:
            for section, values in sections.items():
                for key, value in FORMAT_1_DEFAULTS.get(section, {}).items():
                    values.setdefault(key, value)
                for key, off in RETIRED.get(section, {}).items():
                    if key in values and values.pop(key) != off:
                        raise ValueError(f"{section}.{key}: this checkpoint uses the retired option {key!r}, which "
                                         f"this version of neuralsim no longer has (only {key}={off!r}, off, loads); "
                                         "the code that trained it is in git history (docs/EXPERIMENTS.md)")
        ae, dit = sections["autoencoder"], sections["dit"]
        for name, sub, sub_cls in (("autoencoder", ae, AutoencoderConfig), ("dit", dit, DiTConfig)):
            sub_known = {f.name for f in dataclasses.fields(sub_cls)}
            bad = sorted(set(sub) - sub_known)
            if bad:
                raise ValueError(f"unknown {name} config fields {bad}; known: {sorted(sub_known)}")
        return cls(autoencoder=AutoencoderConfig(**ae), dit=DiTConfig(**dit), **d)


#: Options of format 1 that format 2 retired, by config section: key -> the value that meant "off".  A format-1
#: config holding one at that value loads; any other value is refused, naming the option.
RETIRED: dict[str, dict[str, Any]] = {
    "autoencoder": {"residual_channels": 0},
    "dit": {"wrist_rays": False, "tcp_marks": False},
}

#: Format 1's defaults where format 2's differ, by config section ("" for the top level): what a key missing from a
#: format-1 config meant.
FORMAT_1_DEFAULTS: dict[str, dict[str, Any]] = {
    "": {"window": 16, "gripper_conditioning": "measured", "arm_conditioning": "measured"},
    "autoencoder": {"decoder_layers_per_block": None, "reference_head_channels": 0},
}


PRESETS = ("tiny", "default", "tiny_grounded", "default_grounded")


def preset(name: str) -> WorldModelConfig:
    """A fresh config by preset name: ``default`` (the shipped model's architecture) or ``tiny`` (the tests'); a
    ``_grounded`` suffix switches on ``dit.grounding="projected"`` (the cameras of the config's scene)."""
    if name.endswith("_grounded") and name in PRESETS:
        cfg = preset(name.removesuffix("_grounded"))
        cfg.dit.grounding = "projected"
        return WorldModelConfig.from_dict(cfg.to_dict())
    if name == "default":
        return WorldModelConfig()
    if name == "tiny":
        ae = AutoencoderConfig(image_size=16, block_out_channels=(8, 8), norm_num_groups=4,
                               decoder_layers_per_block=None, reference_head_channels=0)
        dit = DiTConfig(latent_channels=ae.latent_channels, latent_size=ae.latent_size, patch_size=4, dim=32, depth=2,
                        num_heads=2)
        return WorldModelConfig(autoencoder=ae, dit=dit, clip_length=6, window=6, gripper_conditioning="measured",
                                arm_conditioning="measured")
    raise ValueError(f"unknown world model config preset {name!r}; choose one of {PRESETS}")
