"""What training shows besides losses: a text sample and the attention patterns
at each evaluation, and the head report at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from data.prepare import Prepared
from data.tokenizer import Tokenizer, TokenizerError
from trainer.config import TrainConfig


def sample_text(model, tokenizer: Tokenizer, prompt: str, max_new_tokens: int, seed: int) -> str | None:
    """A short sample from the model, or None when the prompt is outside the vocabulary."""
    try:
        ids = tokenizer.encode(prompt)
    except TokenizerError:
        return None
    if not ids:
        return None
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(torch.tensor([ids], device=device), max_new_tokens, temperature=0.8, top_k=200,
                         generator=generator)
    model.train(was_training)
    return tokenizer.decode(out[0].tolist())


@dataclass
class AttentionWatch:
    cfg: TrainConfig
    tokenizer: Tokenizer
    writer: object
    sentences: list[str] = field(default_factory=list)
    aligned: list = field(default_factory=list)
    figures: dict = field(default_factory=dict)  # heatmaps kept between evaluations, redrawn with new weights

    @classmethod
    def create(cls, cfg: TrainConfig, prepared: Prepared, writer) -> AttentionWatch:
        tokenizer = prepared.tokenizer
        sentences = []
        for sentence in cfg.watch_sentences:
            try:
                tokenizer.encode(sentence)
                sentences.append(sentence)
            except TokenizerError as exc:
                print(f"warning: not watching {sentence!r}: {exc}")
        aligned = []
        probes_path = cfg.probes or prepared.probes_path
        if probes_path:
            from data.probes import align, load_probes

            probes = load_probes(probes_path)
            for probe in probes:
                try:
                    aligned.append(align(probe, tokenizer))
                except TokenizerError:
                    pass  # a probe with words the corpus never used cannot be scored
            if len(aligned) < len(probes):
                print(f"warning: {len(probes) - len(aligned)} of {len(probes)} probes in {probes_path} use tokens "
                      f"outside the vocabulary and are left out")
        return cls(cfg, tokenizer, writer, sentences, aligned)

    @property
    def active(self) -> bool:
        return bool(self.sentences or self.aligned)

    def at_evaluation(self, model, step: int) -> None:
        if self.cfg.sample_tokens:
            text = sample_text(model, self.tokenizer, self.cfg.sample_prompt, self.cfg.sample_tokens,
                               self.cfg.seed)
            if text is not None:
                # Markdown collapses single newlines; a code block keeps the text as generated.
                self.writer.add_text("sample", "```\n" + text + "\n```", step)
        if self.active:
            from watch.tensorboard import log_attention

            log_attention(self.writer, step, model, self.tokenizer, self.sentences, self.aligned or None,
                          figures=self.figures)

    def at_end(self, model, step: int) -> dict[str, float]:
        """Prints the head report; returns final metrics for TensorBoard's hparams."""
        if not self.active:
            return {}
        from watch.capture import capture_attention
        from watch.metrics import ablation_effect, evaluate_probes
        from watch.report import format_head_table, last_pronoun_pos, top_attended

        metrics: dict[str, float] = {}
        best = None
        if self.aligned:
            report = evaluate_probes(model, self.aligned)
            best = report.best
            print(f"\nattention on {len(self.aligned)} held-out probes (pronoun -> referent):")
            print(format_head_table(report))
            effect = ablation_effect(model, self.aligned, best.name)
            base, ablated = effect["continuation_accuracy"], effect["continuation_accuracy_ablated"]
            if base is not None:
                print(f"continuation accuracy after the pronoun: {base:.3f}; with {best.name} ablated: "
                      f"{ablated:.3f} ({100 * (ablated - base):+.1f} points)")
                metrics.update({"hparam/continuation_accuracy": base,
                                "hparam/continuation_accuracy_ablated": ablated})
            metrics.update({"hparam/best_head_referent": best.referent, "hparam/best_head_top1": best.top1})
        for sentence in self.sentences:
            ids = self.tokenizer.encode(sentence)
            tokens = self.tokenizer.token_strings(ids)
            query = last_pronoun_pos(tokens)
            if query is None:
                continue
            patterns = capture_attention(model, [ids], crop=True)[0]
            layer = best.layer if best is not None else len(patterns) - 1
            print(f"\n{sentence!r}: where {tokens[query].strip()!r} looks, layer {layer}:")
            print(top_attended(patterns[layer], tokens, query, k=3, layer=layer))
        return metrics
