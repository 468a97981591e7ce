"""Watching attention: capture patterns, score heads on pronoun probes,
draw heatmaps, and log it all to TensorBoard or a terminal."""

from watch.capture import capture_attention, continuation_logits, evaluating
from watch.heads import ablation_for, ablation_names, all_heads, head_name, parse_head
from watch.heatmaps import HeatmapFigure, display_token, head_figure, layer_figure, save_png
from watch.metrics import (
    ContinuationStats,
    HeadStats,
    ProbeReport,
    ablation_effect,
    baselines,
    best_head,
    continuation_accuracy,
    continuation_stats,
    evaluate_probes,
    head_stats,
)
from watch.report import format_head_table, top_attended
from watch.tensorboard import log_attention, log_scores

__all__ = [
    "ContinuationStats", "HeadStats", "HeatmapFigure", "ProbeReport", "ablation_effect", "ablation_for",
    "ablation_names",
    "all_heads", "baselines", "best_head", "capture_attention", "continuation_accuracy", "continuation_logits",
    "continuation_stats", "display_token", "evaluate_probes", "evaluating", "format_head_table", "head_figure",
    "head_name", "head_stats", "layer_figure", "log_attention", "log_scores", "parse_head", "save_png",
    "top_attended",
]
