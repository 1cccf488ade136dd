"""Charts: valid specs, data equal to the tensors they show, correct axes, stable output."""
import torch

from annotated_transformer.model import make_model, subsequent_mask
from annotated_transformer.viz import (_stable_html_renderer, attention_map, attention_weights, layer_view,
                                       mask_chart, save_static)


def test_mask_chart_cells_equal_subsequent_mask():
    ch = mask_chart(7)
    ch.to_dict()
    cells = torch.tensor(ch.data.sort_values(["row", "col"]).value.tolist()).view(7, 7)
    assert torch.equal(cells.bool(), subsequent_mask(7)[0])


def test_decoder_source_attention_has_target_rows_and_source_columns():
    torch.manual_seed(0)
    model = make_model(20, 30, N=2, d_model=32, d_ff=64, h=4)
    src, tgt = torch.tensor([1, 5, 6, 7, 8, 2]), torch.tensor([0, 9, 10])
    src_tokens, tgt_tokens = ["<s>", "ein", "Hund", "läuft", ".", "</s>"], ["<s>", "a", "dog"]
    w = attention_weights(model, src, tgt)
    assert w["decoder_src"][0].shape == (4, 3, 6)  # (heads, target queries, source keys)
    assert w["decoder_self"][0].shape == (4, 3, 3) and w["encoder"][0].shape == (4, 6, 6)
    ch = attention_map(model, src, tgt, src_tokens, tgt_tokens, "decoder_src", layer=1, head=2, weights=w)
    spec = ch.to_dict()
    assert spec["encoding"]["y"]["field"] == "row" and spec["encoding"]["x"]["field"] == "col"
    df = ch.data.sort_values(["row", "col"])
    assert list(df.drop_duplicates("row").row_label) == tgt_tokens
    assert list(df.drop_duplicates("col").col_label) == src_tokens
    torch.testing.assert_close(torch.tensor(df.value.tolist()).view(3, 6), w["decoder_src"][1][2], atol=1e-5, rtol=0)
    torch.testing.assert_close(w["decoder_src"][1].sum(-1), torch.ones(4, 3))
    assert model.training  # attention_weights restores the mode
    assert len(layer_view(model, src, tgt, src_tokens, tgt_tokens, "encoder", 0, weights=w).to_dict()["hconcat"]) == 4


def test_html_output_is_stable_and_static_export_works(tmp_path):
    a = _stable_html_renderer(mask_chart(5).to_dict())["text/html"]
    b = _stable_html_renderer(mask_chart(5).to_dict())["text/html"]
    assert a == b
    assert save_static(mask_chart(5), tmp_path / "m.svg").read_text().startswith("<svg")
