// oomb run: its flags and their help; the run itself is cli/run_job.cpp (run_run), around the
// runner (runner/runner.h), which checks the run, builds the backend (CPU; CUDA with the CUPTI
// collector when built), runs the steps and assembles the trace.
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/mpi_job.h"
#include "cli/run_args.h"
#include "cli/scenario_flags.h"

namespace oomb::cli {
namespace {

const Registrar reg("run", "Execute chunk-recurrent training steps (cpu reference backend, or cuda) and measure them",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<RunArgs>();
                      a->flags.add_to(sub, false);
                      // The run's own page-dtype defaults (the shared help states the planning defaults).
                      sub.get_option("--kv-dtype")
                          ->description("KV page storage: fp32 or bf16 (round to nearest even, converted to fp32 "
                                        "for compute). Default for oomb run: fp32, the exact reference (with --plan: "
                                        "the plan's dtype, this flag overrides it; presets do not change it); "
                                        "fp16/fp8 are modelled by simulate and plan but not executed (both backends "
                                        "store fp32 and bf16 pages)");
                      sub.get_option("--kv-grad-dtype")
                          ->description("KV-gradient page storage: fp32 or bf16 (each chunk's fp32 contribution "
                                        "is added and rounded once). Default for oomb run: fp32 (with --plan: the "
                                        "plan's dtype, this flag overrides it)");
                      sub.add_option("--plan", a->plan,
                                     "Run a plan made by `oomb plan --out` (its model, context and knobs; --layers may "
                                     "still cut the model for a quick run)");
                      sub.add_option("--backend", a->backend, "cpu (fp32 reference) or cuda")->capture_default_str();
                      sub.add_option("--attention-kernel", a->attention_kernel,
                                     "--backend cuda only: the paged-attention kernels. auto (default): bf16 tensor "
                                     "cores (WMMA; operands rounded to bf16, fp32 softmax and accumulation, ~3e-3 "
                                     "relative error) where they run (head_dim 64 or 128, sm_80+, 16-byte-aligned "
                                     "buffers), the fp32 kernels elsewhere; fp32: the fp32 CUDA-core kernels (the "
                                     "reference, ~1e-5 from the CPU backend); bf16-tc: tensor cores or an error. "
                                     "The choice and how many calls each family ran are printed and recorded in "
                                     "--json (cuda) and the trace (metadata.extra.cuda)");
                      sub.add_option("--gemm-precision", a->gemm_precision,
                                     "--backend cuda only: the linear layers' GEMMs (cuBLASLt). bf16 (default for "
                                     "oomb run, except fp32 for a run without --plan on fp32 weights (--param-dtype "
                                     "fp32): the method's bf16 training; operands rounded to bf16, fp32 "
                                     "accumulation and fp32 results, ~2e-3 relative error per GEMM; a GEMM with no "
                                     "bf16 algorithm runs in fp32), tf32 (tensor cores on fp32 operands, 10-bit "
                                     "mantissas) or fp32 (the reference, the backend library's default). The choice "
                                     "and how many GEMMs ran in each precision are printed and recorded in --json "
                                     "(cuda) and the trace (metadata.extra.cuda)");
                      sub.add_option("--steps", a->steps,
                                     "Timed training steps, 1..1000000 (one sequence each; default 1, or 3 when a "
                                     "--trace is written: the trace's step_s is the fastest of them)");
                      sub.add_option("--warmup", a->warmup,
                                     "Untimed training steps before the --steps, 0..1000000 (default: 1 when a "
                                     "--trace is written, else 0); they train like the others and are in the "
                                     "trace's events");
                      sub.add_option("--threads", a->threads,
                                     "--backend cpu: compute threads, 0..1024 (OpenMP loops and BLAS GEMMs; results "
                                     "are identical at any count; 1024, a fixed bound so that a command means the "
                                     "same on every machine, is far above any CPU's count and far below what the "
                                     "OpenMP runtime fails to create). Default (0): the CPUs this process may use. Recorded in "
                                     "the trace (cpu_threads): validate compares it with a profile calibrated at "
                                     "the same count");
                      sub.add_option("--tokens", a->tokens,
                                     "Binary file of little-endian uint32 token ids (default: seeded synthetic)");
                      sub.add_option("--weights", a->weights,
                                     "Initial weights: a Hugging Face checkpoint (folder with model.safetensors or "
                                     "model.safetensors.index.json + shards, the index, or one .safetensors file; "
                                     "F32, BF16 or F16 tensors, HF names). A folder holding both is read as its "
                                     "model.safetensors (the single file first, as Hugging Face's loader); shards "
                                     "are files inside the index's folder (no absolute path, no '..'); a tied "
                                     "model's lm_head.weight is accepted when it equals the embedding");
                      sub.add_option("--save-weights", a->save_weights,
                                     "Write the final weights (F32, HF layout): a folder (new or existing; other "
                                     "files in it stay), or FILE.safetensors; sharded with an index above "
                                     "--max-shard-bytes. Every file is written aside first and the checkpoint "
                                     "switched at the end: an interrupted or failed save leaves the old one whole");
                      sub.add_option("--dump-grads", a->dump_grads,
                                     "Write the accumulated parameter gradients (same layout as --save-weights; "
                                     "LoRA: the adapters' gradients, PEFT's tensor names)");
                      sub.add_option("--adapter", a->adapter,
                                     "LoRA: start from this Hugging Face PEFT adapter folder (adapter_config.json + "
                                     "adapter_model.safetensors, lora_A [r, in] / lora_B [out, r] per target). Its r, "
                                     "lora_alpha and target_modules must match --lora-* or the plan (without them "
                                     "they are taken from it); a missing, extra or misshapen tensor is an error "
                                     "naming it. Default: PEFT's initialisation (A kaiming-uniform, B zero; seeded)");
                      sub.add_option("--save-adapter", a->save_adapter,
                                     "LoRA: write the trained adapter as a PEFT folder (adapter_config.json, "
                                     "adapter_model.safetensors in F32), loadable by PeftModel.from_pretrained; both "
                                     "files written aside and switched in together");
                      sub.add_option("--lora-init-b-std", a->lora_init_b_std,
                                     "LoRA without --adapter: draw B from N(0, std^2) instead of PEFT's zeros, so that "
                                     "the first step's A gradients are not zero (for --reference checks)")
                          ->capture_default_str();
                      sub.add_option("--max-shard-bytes", a->max_shard_bytes,
                                     "Largest shard --save-weights / --dump-grads write, 1024..2^50 bytes (default "
                                     "5e9, Hugging Face's 5GB)")
                          ->capture_default_str();
                      sub.add_option("--seed", a->seed, "Seed of the random weights and synthetic tokens")
                          ->capture_default_str()
                          ->check(unsigned_integer());
                      sub.add_option("--init-std", a->init_std, "Std of the random weights")->capture_default_str();
                      sub.add_option("--lr", a->lr, "AdamW learning rate (with --optimizer gpu|host)")
                          ->capture_default_str();
                      sub.add_option("--grad-accum", a->grad_accum, "Steps per optimizer step, 1..1000000")->capture_default_str();
                      sub.add_option("--trace", a->trace, "Write the measured trace (oomb.trace/1 JSON) to FILE (at most 1000 steps, warm-up included: "
                                     "it is held in memory until written; on SIGTERM/SIGINT the completed steps are written, then the run ends by the signal)");
                      sub.add_option("--detail", a->detail, "Trace detail: step, chunk, layer (default), op")
                          ->capture_default_str();
                      sub.add_option("--trace-timing", a->trace_timing,
                                     "How the --trace is timed: cupti (default for --backend cuda in a build with "
                                     "CUPTI: kernel and copy times on the device, tagged with the driver's (stage, "
                                     "chunk, layer, pass); source cuda-cupti, which `oomb validate` compares in "
                                     "time) or host (wall clock around each op; on cuda these are enqueue times, "
                                     "not compared in time; always for --backend cpu). Tracing overhead = step "
                                     "time with --trace / step time of the same run without it (both printed as "
                                     "'step time', a mean over all steps, warm-up included: compare runs with the "
                                     "same --steps and --warmup); a CUPTI run also prints its record count");
                      sub.add_flag("--reference", a->reference,
                                   "Also run the full-sequence reference and report the gradient error");
                      sub.add_flag("--measure-recall", a->measure_recall,
                                   "Sparse: per (chunk, layer) of stage 1, the share of the dense attention "
                                   "probability mass the selected pages (+ own chunk) capture, averaged over "
                                   "tokens and heads; mean/min printed, all in the trace (small contexts: keeps a "
                                   "host copy of the keys and scores every earlier key)");
                      sub.add_flag("--compare-dense", a->compare_dense,
                                   "Sparse: also run step 1 with dense attention (same weights and tokens) and "
                                   "report the loss difference and the worst relative L2 gradient error "
                                   "(with --optimizer none; small contexts)");
                      sub.add_flag("--json", a->json, "Print {loss, tokens_per_s, measured: {...}} as JSON");
                      sub.add_flag("--quiet", a->quiet, "No progress line");
                      sub.footer(
                          "Examples:\n"
                          "  oomb run --model tiny --context 16K --backend cpu --trace t.json\n"
                          "  oomb run --model tiny --context 16K --backend cuda --steps 2 --trace t.json && oomb "
                          "validate --trace t.json --gpu h200   (CUPTI-timed)\n"
                          "  oomb plan --model tiny --gpu h200 --context 16K --resident-layers 1 --out p.json && "
                          "oomb run --plan p.json --trace t.json && oomb validate --plan p.json --trace t.json\n"
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --resident-layers 1 --reference\n"
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --kv-dtype bf16 --reference   "
                          "(bf16 KV pages)\n"
                          "  oomb run --model tiny --context 8K --attention sparse --budget 4 --chunk 1K --page 64\n"
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --lora-rank 8 --lora-targets "
                          "all-linear --optimizer gpu --steps 3 --save-adapter out/adapter   (LoRA, PEFT folder out)\n"
                          "  oomb run --model tiny --context 4K --attention sparse --budget 4 --chunk 512 --page 64 "
                          "--measure-recall --compare-dense --trace t.json\n"
                          "Exit status: 0 done, 2 bad input, 4 a step failed on the device (the error names the "
                          "stage, chunk, layer and op it was issued under; --json and --trace still record the "
                          "completed steps).");
                      return [a, &sub] {
                        a->command = "oomb run";
                        a->steps_given = sub.get_option("--steps")->count() > 0;
                        a->warmup_given = sub.get_option("--warmup")->count() > 0;
                        for (const auto* opt : sub.get_options()) {
                          if (opt->count() == 0 || opt->get_name() == "--help") continue;
                          a->command += " " + opt->get_name();
                          if (opt->get_expected_min() > 0)
                            for (const auto& r : opt->results()) a->command += " " + r;
                        }
                        // The ranks of a job agree on the command and on the files these flags read.
                        const std::vector<std::string> inputs = {"--plan", "--model", "--gpu", "--host",
                                                                 "--tokens", "--adapter", "--weights"};
                        return run_as_job("oomb run", inputs,
                                          [a](executor::Communicator* comm, const std::string& job) {
                                            return run_run(*a, comm, job);
                                          });
                      };
                    });

}  // namespace
}  // namespace oomb::cli
