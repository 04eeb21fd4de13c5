"""Engine settings shared by the server tests: the demo model with one shape bucket
(64 tokens x 16 sequences x 16 pages), so warm-up is a single compile."""

ENGINE_KW = dict(
    model="demo", num_devices=1, num_pages=96, page_size=16, max_model_len=256,
    min_token_bucket=64, max_num_batched_tokens=64, max_num_seqs=16, min_seq_bucket=16, min_page_bucket=16,
)
