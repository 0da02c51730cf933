"""The fidelity benchmark's printed report (:mod:`benchmarks.fidelity`): :func:`format_table` of a JSON report."""

from __future__ import annotations

import math
from typing import Any

from neuralsim.episode import VIEW_NAMES

from .paired import format_paired


def _fmt(v, width: int, decimals: int, scale: float = 1.0, unit: str = "") -> str:
    """``v * scale`` right-aligned in ``width`` characters (unit included), or ``-`` when missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"{'-':>{width}}"
    return f"{f'{v * scale:.{decimals}f}{unit}':>{width}}"


def _per_view(vals: dict[str, float]) -> str:
    """``exterior_image_1 22.74  exterior_image_2 22.98  wrist_image 16.18`` for a per-view metric dict."""
    return "  ".join(f"{v.replace('_left', '')} {vals[v]:.4g}" for v in VIEW_NAMES)


def format_table(report: dict[str, Any]) -> str:
    """The headline table: one row per (checkpoint, split), then per-view detail."""
    cond = report.get("protocol", {}).get("conditioning", "replay")
    head = (f"{'model':<14}{'split':<9}{'eps':>4}  {'PSNR in':>8}{'PSNR 2x':>8}  {'SSIM in':>8}{'SSIM 2x':>8}"
            f"  {'pos err':>8}{'<5cm':>6}  {'probe floor':>11}")
    lines = [head, "-" * len(head)]
    detail = []
    # --autoencoder-only reports: the ceiling and the probe on the round trip stand in the columns
    ae_only = bool(report.get("protocol", {}).get("autoencoder_only"))
    for entry in report["results"]:
        for split, r in entry["splits"].items():
            pos = r.get("position") or {}
            floor = pos.get("probe_on_true_frames_error_m_mean")
            frames = (r.get("autoencoder_ceiling") or {}) if ae_only else r
            err, share = ((pos.get("probe_on_round_trip_error_m_mean"), pos.get("probe_on_round_trip_share_below_5cm"))
                          if ae_only else (pos.get("end_error_m_mean"), pos.get("share_below_5cm")))
            get = lambda m, w: ((frames.get(m) or {}).get(w) or {}).get("mean")  # noqa: E731
            lines.append(
                f"{entry['label'][:13]:<14}{split:<9}{r['episodes']:>4}  {_fmt(get('psnr', 'in_horizon'), 8, 2)}"
                f"{_fmt(get('psnr', 'beyond'), 8, 2)}  {_fmt(get('ssim', 'in_horizon'), 8, 4)}"
                f"{_fmt(get('ssim', 'beyond'), 8, 4)}  {_fmt(err, 8, 1, 100, 'cm')}"
                f"{_fmt(share, 6, 0, 100, '%')}  {_fmt(floor, 11, 1, 100, 'cm')}")
            for metric in ("psnr", "ssim", "sharpness"):
                for w in ("in_horizon", "beyond"):
                    vals = (r.get(metric) or {}).get(w)
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}")
            for metric, windows in (r.get("autoencoder_ceiling") or {}).items():
                for w, vals in windows.items():
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}"
                                      f"  mean {vals['mean']:.4g}  (autoencoder ceiling)")
            for metric, windows in (r.get("hold_first_frame") or {}).items():
                for w, vals in windows.items():
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}"
                                      f"  mean {vals['mean']:.4g}  (frame 0 held still: the no-skill floor)")
            end = r.get("end_frame")
            if end:
                detail.append(f"  {entry['label']:<12} {split:<8} last frame: PSNR {end['psnr_mean']:.2f} dB (frame 0 "
                              f"held still {end['hold_first_frame_psnr_mean']:.2f}); {100 * end['share_lost']:.0f}% of "
                              f"the episodes end below frame 0 held still (lost the scene)")
            drift = r.get("adapter_replay")
            if drift:
                detail.append(f"  {entry['label']:<12} {split:<8} the action adapter's replay ends the flange "
                              f"{100 * drift['end_flange_error_m_mean']:.1f} cm from the simulator's (mean; "
                              f"{100 * drift['share_below_5cm']:.0f}% within 5 cm; by task " + ", ".join(
                                  f"{k} {100 * v:.1f} cm" for k, v in drift["by_task_m_mean"].items()) + ")")
            if pos.get("share_below_5cm_ci95"):
                lo, hi = pos["share_below_5cm_ci95"]
                detail.append(f"  {entry['label']:<12} {split:<8} cube within 5 cm at the end in "
                              f"{100 * pos['share_below_5cm']:.0f}% of {pos['episodes']} episodes "
                              f"(95% Wilson interval {100 * lo:.0f}-{100 * hi:.0f}%)")
            if pos.get("cube_left_at_start_error_m_mean") is not None:
                detail.append(f"  {entry['label']:<12} {split:<8} cube moved "
                              f"{100 * pos['generated_end_from_start_m_mean']:.1f} cm in the generated video, "
                              f"{100 * pos['cube_left_at_start_error_m_mean']:.1f} cm in the simulator (the error of "
                              f"never moving it; that puts {100 * pos['cube_left_at_start_share_below_5cm']:.0f}% "
                              f"within 5 cm)")
            if pos.get("probe_on_round_trip_error_m_mean") is not None:
                detail.append(f"  {entry['label']:<12} {split:<8} cube: the probe on the true last frame through the "
                              f"autoencoder errs {100 * pos['probe_on_round_trip_error_m_mean']:.1f} cm, "
                              f"{100 * pos['probe_on_round_trip_share_below_5cm']:.0f}% < 5 cm (the floor of a "
                              f"perfect DiT)")
            if pos.get("track"):
                detail.append(f"  {entry['label']:<12} {split:<8} cube vs the true frame's, by frame: " + ", ".join(
                    f"{k['frame']} {100 * k['error_m_mean']:.1f} cm" for k in pos["track"]))
            for name, g in (r.get("by_group") or {}).items():
                cube = "" if g.get("share_below_5cm") is None else f", cube < 5 cm {100 * g['share_below_5cm']:.0f}%"
                detail.append(f"  {entry['label']:<12} {split:<8} {name:<20} {g['episodes']:>3} episodes: PSNR "
                              f"{_fmt(g['psnr_in_horizon'], 0, 2).strip()} / {_fmt(g['psnr_beyond'], 0, 2).strip()} "
                              f"dB, SSIM {_fmt(g['ssim_in_horizon'], 0, 4).strip()} / "
                              f"{_fmt(g['ssim_beyond'], 0, 4).strip()}{cube} (in / beyond, episode means)")
            if "targets_met" in r:
                t = ", ".join(f"{k} {'yes' if v else ('no' if v is not None else '-')}"
                              for k, v in r["targets_met"].items())
                detail.append(f"  {entry['label']:<12} {split:<8} targets: {t}")
    if not ae_only:
        lines.append(f"(conditioning: {cond} -- " + ("the env replays the recorded actions)" if cond == "replay" else
                                                     "the recorded robot state, not the env's action adapter)"))
    if ae_only:
        lines.append("(--autoencoder-only: PSNR / SSIM are each autoencoder's round trip of the true frames, the "
                     "position columns the probe on the round trip of the last frame)")
    paired = [format_paired(p) for p in report.get("paired") or []]
    return "\n".join(lines + ["", "per view:"] + detail + [line for p in paired for line in ("", p)])

