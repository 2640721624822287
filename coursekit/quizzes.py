"""The quiz of each module (ungraded self-checks with instant feedback)."""

from __future__ import annotations

from coursekit.arguments import choice
from coursekit.quiz import Quiz, QuizQuestion

_WELCOME = [
    QuizQuestion(
        "Micro-batches of 8 samples, accum_steps = 4, on 2 data-parallel processes. "
        "How many samples does each optimizer step learn from?",
        ("8", "14", "32", "64"),
        3,
        "Effective batch = micro_batch_size x accum_steps x world_size = 8 x 4 x 2 = 64.",
    ),
    QuizQuestion(
        "check(...) says all public checks pass. What does that tell you?",
        (
            "Your notebook will get full marks.",
            "Your function passes the public checks; hidden tests run when you hand in.",
            "Nothing: the checks are only examples.",
        ),
        1,
        "Public checks catch the common mistakes instantly; the grader also runs hidden "
        "tests on inputs drawn at grading time, so passing here is necessary, not sufficient.",
    ),
]

_ACCUMULATION = [
    QuizQuestion(
        "What does gradient accumulation let you do?",
        (
            "Train faster than with the same batch in one piece.",
            "Train with an effective batch larger than fits in memory at once, holding the "
            "activations of only one micro-batch at a time.",
            "Shrink the memory taken by parameters, gradients and optimizer state.",
            "Use a larger learning rate at the same effective batch.",
        ),
        1,
        "Only activations scale with the micro-batch; parameters, gradients and optimizer "
        "state stay the same size. It is usually slower per sample, not faster: smaller "
        "micro-batches keep the hardware less busy (several times slower for tiny ones).",
    ),
    QuizQuestion(
        "With accum_steps = N, when do optimizer.step() and optimizer.zero_grad() run?",
        (
            "Both after every micro-batch.",
            "step() every N micro-batches; zero_grad() after every micro-batch.",
            "Both once per window of N micro-batches: step() at the window's end, then "
            "zero_grad().",
            "zero_grad() once per window; step() after every micro-batch.",
        ),
        2,
        "backward() runs for every micro-batch so the gradients add up in .grad; the step "
        "and the reset happen once per window (and once for a last, shorter window).",
    ),
    QuizQuestion(
        "You accumulate N = 4 mean-reduced micro-batch losses but forget to divide by 4. "
        "What does plain SGD do?",
        (
            "Nothing different: SGD normalises the gradient.",
            "Steps 4 times too far, as if the learning rate were 4 times larger.",
            "Steps 4 times too short.",
        ),
        1,
        "The summed gradient is 4 times the mean gradient, and SGD's step is lr x gradient.",
    ),
    QuizQuestion(
        "In float32, accumulated and full-batch gradients differ in the last digits, while in "
        "float64 they agree to about 1e-15. Why?",
        (
            "Accumulation is an approximation that float64 hides.",
            "Floating-point addition is not associative: the same terms summed in another "
            "order round differently, and float32 keeps only about 7 significant digits.",
            "float32 tensors skip some micro-batches.",
        ),
        1,
        "The mathematics is exact; only rounding differs. That is why the checks ask for "
        "equality to 1e-10 in float64 but allow 1e-5 in float32.",
    ),
    QuizQuestion(
        "10 equal-sized micro-batches, accum_steps = 4. How many optimizer steps, and what is "
        "the last window's loss divided by?",
        (
            "2 steps; the last 2 micro-batches are dropped.",
            "3 steps; the last window is divided by 4.",
            "3 steps; the last window has 2 micro-batches and is divided by 2.",
        ),
        2,
        "Windows of 4, 4 and 2. Dividing the last one by 4 would halve its gradient (and, "
        "under SGD, its step); dropping it wastes its forward and backward passes.",
    ),
]

_LOSS_SCALING = [
    QuizQuestion(
        "You accumulate N = 8 micro-batches with SGD at lr = 0.01 and forget to divide the "
        "loss by 8. Which correct run (with 1/N) is identical to yours?",
        ("SGD at lr = 0.01.", "SGD at lr = 0.08.", "SGD at lr = 0.00125."),
        1,
        "The summed gradient is 8 times the mean, and SGD steps by lr x gradient: exactly "
        "an 8 times larger learning rate.",
    ),
    QuizQuestion(
        "The same mistake under Adam (no weight decay, no gradient clipping). What changes?",
        (
            "Almost nothing: Adam divides by the root of its squared-gradient average, so the "
            "factor cancels except against epsilon, which acts as epsilon / 8.",
            "Every step is 8 times longer.",
            "Every step is 8 times shorter.",
        ),
        0,
        "m grows 8 times and sqrt(v) grows 8 times; only epsilon does not. With "
        "Adam(weight_decay=...) the decay also acts 8 times weaker, and gradient clipping at a "
        "fixed norm acts 8 times tighter.",
    ),
    QuizQuestion(
        "A window has two micro-batches: A with 100 real tokens, B with 10. Under the mean of "
        "means (each micro-batch's mean loss, divided by 2), how much does one token of B "
        "weigh compared with one token of A?",
        ("The same.", "10 times as much.", "A tenth as much."),
        1,
        "A token of A weighs 1/(2 x 100), a token of B 1/(2 x 10). The right weight for both "
        "is 1/110: sum the losses and divide once by the window's 110 tokens.",
    ),
    QuizQuestion(
        "Training on 4 GPUs with DDP, which token count should each rank divide its summed "
        "loss by?",
        (
            "Its own window's real tokens.",
            "The padded length of its batch.",
            "The real tokens of all ranks' windows together (an all_reduce of the counts), "
            "then multiply by world_size because DDP averages the gradients.",
        ),
        2,
        "Each rank's own count is the mean of means again, across ranks (transformers #34242).",
    ),
    QuizQuestion(
        "With a GradScaler and N micro-batches per window, what runs once per window?",
        (
            "scaler.scale(loss).backward() only.",
            "scaler.unscale_(optimizer), clipping, scaler.step(optimizer) and scaler.update(); "
            "scaler.scale(loss).backward() runs for every micro-batch.",
            "Everything runs for every micro-batch.",
        ),
        1,
        "unscale_ divides the whole sum once; update may change the scale, which must stay "
        "the same for all the gradients that add up.",
    ),
    QuizQuestion(
        "One micro-batch of a window overflows to inf under a GradScaler. What happens?",
        (
            "The whole window's step is skipped and update() halves the scale.",
            "The bad micro-batch is dropped and the step uses the others.",
            "The step runs with the inf and the weights become NaN.",
        ),
        0,
        "The inf reaches the summed gradient; scaler.step sees it after unscale_ and skips "
        "the step, and update() lowers the scale for the next window.",
    ),
    QuizQuestion(
        "1000 micro-batches per epoch, N = 4, 3 epochs. How long should the learning-rate "
        "schedule be, and how often does it step?",
        (
            "750 steps, after every micro-batch.",
            "750 steps, after every optimizer step.",
            "3000 steps, after every optimizer step.",
        ),
        1,
        "250 optimizer steps per epoch x 3. Stepped per micro-batch, a 750-step schedule runs "
        "4 times too fast; a 3000-step schedule stepped per optimizer step only gets a quarter "
        "of the way.",
    ),
]

_BATCH_DEPENDENCE = [
    QuizQuestion(
        "Which normalisation layer pairs cleanly with gradient accumulation, and why?",
        (
            "GroupNorm (or LayerNorm): it normalises each sample over its own features, so a "
            "sample's loss does not depend on the other samples, and accumulated micro-batches "
            "give exactly the full-batch gradient.",
            "BatchNorm, because it makes training stable at any batch size.",
            "None: every normalisation layer breaks accumulation.",
        ),
        0,
        "Accumulation is exact when every sample's loss depends on that sample alone. "
        "GroupNorm and LayerNorm keep that; BatchNorm in train mode does not.",
    ),
    QuizQuestion(
        "Why do four micro-batches of 8 with BatchNorm give a different gradient from one "
        "batch of 32?",
        (
            "Because the loss is not divided by 4.",
            "Because in train mode BatchNorm normalises with its batch's mean and variance: "
            "four micro-batches use four different statistics of 8 samples each, one batch "
            "uses one statistic of 32, so the forward passes, and the gradients, differ.",
            "Because the running statistics are updated four times.",
        ),
        1,
        "The running statistics are updated four times too, but they are used in eval mode; "
        "the gradient differs because of the statistics used in the forward pass.",
    ),
    QuizQuestion(
        "A BatchNorm with momentum 0.1 sees N = 4 micro-batches per optimizer step. Which "
        "momentum gives the newest window the weight 0.1 again?",
        ("0.1 / 4 = 0.025", "1 - 0.9 ** (1 / 4) = 0.026", "1 - 0.9 ** 4 = 0.344"),
        1,
        "(1 - m') ** 4 must equal 1 - 0.1. Dividing by 4 is close but not equal; 0.344 is "
        "what the window weighs with the uncorrected momentum.",
    ),
    QuizQuestion(
        "You freeze a pretrained model's BatchNorm layers with layer.eval(), then your training "
        "loop calls model.train() at the start of each epoch. What happens?",
        (
            "Nothing: eval() is permanent.",
            "model.train() raises an error.",
            "The BatchNorm layers are back in train mode, using micro-batch statistics again.",
        ),
        2,
        "train() sets every submodule's mode. Freeze again after it, or use a module whose "
        "forward always uses stored statistics (such as torchvision's FrozenBatchNorm2d).",
    ),
    QuizQuestion(
        "Why does plain accumulation change a contrastive loss with in-batch negatives?",
        (
            "It does not: the loss is a mean over pairs.",
            "Each query only meets the keys of its own micro-batch as negatives, so each "
            "micro-batch computes an easier loss than the full batch would.",
            "Because the temperature is divided by N.",
        ),
        1,
        "Pair i's loss depends on every key in its batch. GradCache embeds the whole batch "
        "first, then back-propagates the full loss's gradient one micro-batch at a time.",
    ),
]

_DISTRIBUTED = [
    QuizQuestion(
        "4 GPUs, micro-batches of 8, gradient_accumulation_steps = 4. What is DeepSpeed's "
        "train_batch_size?",
        ("32", "128", "16"),
        1,
        "micro-batch x accumulation steps x world size = 8 x 4 x 4 = 128.",
    ),
    QuizQuestion(
        "Under DDP you wrap only loss.backward() of the first N - 1 micro-batches in "
        "model.no_sync(); the forward runs outside. How many all-reduces per optimizer step?",
        (
            "N: DDP decides during the forward whether the backward synchronises.",
            "1, as intended.",
            "0: nothing is synchronised.",
        ),
        0,
        "The DDP docs say it: the forward pass must be inside the context manager, or the "
        "gradients are still synchronised. The result is right, just N times the traffic.",
    ),
    QuizQuestion(
        "7.5B parameters, mixed-precision Adam, 64 GPUs, ZeRO stage 2. About how much memory "
        "do the model states take per GPU, in the paper's accounting?",
        ("120 GB", "31.4 GB", "16.6 GB", "1.9 GB"),
        2,
        "2 psi of fp16 weights stay whole (15 GB); gradients and optimizer state are sharded: "
        "(2 + 12) x 7.5e9 / 64 bytes = 1.6 GB. DeepSpeed's own estimator, which also counts "
        "an fp32 copy of the gradient shard (18 bytes sharded instead of 14), says 17.1 GB.",
    ),
    QuizQuestion(
        "Why does DeepSpeed's no_sync() refuse ZeRO stages 2 and 3?",
        (
            "Because those stages keep only a shard of the gradients: they cannot let "
            "gradients wait whole on each device, so they reduce-scatter every micro-batch.",
            "Because no_sync() is only for the optimizer step.",
            "Because ZeRO-2 and ZeRO-3 never communicate.",
        ),
        0,
        "Skipping the reduce-scatter would need the whole gradient on every device: the "
        "memory those stages exist to save. FSDP's gradient-sync switch makes that trade.",
    ),
    QuizQuestion(
        "A GPipe pipeline has 4 stages. How many micro-batches per step bring the bubble "
        "under 10%?",
        ("4", "16", "28"),
        2,
        "(p - 1) / (m + p - 1) = 3 / (m + 3) < 0.1 needs m > 27: 28 micro-batches give 9.7%; "
        "16 give 15.8%.",
    ),
]

_FINAL = [
    QuizQuestion(
        "8 micro-batches per epoch, accum_steps = 4, each loss divided by 4, and the window's end "
        "tested with `if i % accum_steps == 0:` (i counts from 0 each epoch), then step() and "
        "zero_grad(). Which micro-batches does each step learn from?",
        (
            "0-3, then 4-7, as intended.",
            "0-4, then 5-7.",
            "0 alone (a quarter of its gradient), then 1-4; 5-7 stay in .grad and join the "
            "first step of the next epoch.",
        ),
        2,
        "i % 4 == 0 is true at i = 0 and i = 4, so the first window is one micro-batch and "
        "nothing steps or clears the last three. The end of a window is (i + 1) % accum_steps "
        "== 0, plus one more step for a last, shorter window.",
    ),
    QuizQuestion(
        "4 epochs of 1,010 micro-batches, accum_steps = 8, a warm-up then cosine schedule. How "
        "long should the schedule be, and when does scheduler.step() run?",
        (
            "505 steps (4,040 / 8), after every optimizer step.",
            "508 steps, after every optimizer step.",
            "4,040 steps, after every optimizer step.",
            "508 steps, after every micro-batch.",
        ),
        1,
        "Each epoch has ceil(1010 / 8) = 127 windows, the last one of 2 micro-batches: 4 x 127 "
        "= 508 optimizer steps. 505 forgets the short last windows and ends 3 steps early; "
        "4,040 stepped per optimizer step gets only about an eighth of the way; stepped per "
        "micro-batch, 508 steps are over in half an epoch.",
    ),
    QuizQuestion(
        "The weights stay float32 and the forward runs under torch.autocast(..., "
        "dtype=torch.bfloat16), with 8 micro-batches per step. What does accumulation need "
        "beyond the usual loop?",
        (
            "Nothing more: .grad is float32 and bf16 needs no GradScaler.",
            "A float32 buffer, because autocast makes .grad bf16.",
            "A GradScaler, with unscale_() and update() once per window, as for fp16.",
        ),
        0,
        "Under autocast the parameters, and so their .grad, stay float32; only some operations "
        "compute in bf16. bf16 has float32's 8 exponent bits, so gradients do not underflow "
        "as in fp16. The float32 buffer is for a model cast with model.to(torch.bfloat16), "
        "whose .grad is bf16 and rounds on every addition.",
    ),
    QuizQuestion(
        "You fine-tune a pretrained CNN with BatchNorm, micro-batches of 4 and accum_steps = 8. "
        "Which change makes the 8 micro-batches give exactly the gradient that one batch of "
        "the same 32 images would give through the same model?",
        (
            "Set every BatchNorm's momentum to 1 - 0.9 ** (1 / 8) = 0.013.",
            "Freeze the BatchNorm layers in eval mode (again after every model.train()).",
            "Divide each micro-batch's loss by 8.",
        ),
        1,
        "In train mode BatchNorm normalises with each micro-batch's statistics, so the forward "
        "pass itself differs. Frozen BatchNorm makes each sample's loss depend on that sample "
        "alone. (Swapping in GroupNorm would too, but a pretrained network's features expect "
        "its BatchNorm: that is a different model, to train, not to fine-tune.) "
        "The momentum fix corrects only the running statistics used in eval "
        "mode: the gradient is unchanged. Dividing by 8 is needed anyway, but it only sets the "
        "scale.",
    ),
    QuizQuestion(
        "DDP on 8 GPUs, micro-batches of 4 sequences, and a recipe that wants 512 sequences per "
        "step. You run forward and backward of every micro-batch but the last inside "
        "model.no_sync(). What is accum_steps, and how often are the gradients all-reduced "
        "per optimizer step?",
        (
            "128, once.",
            "16, 16 times.",
            "16, once.",
        ),
        2,
        "512 = 4 x accum_steps x 8 gives 16. With the forward inside no_sync() only the last "
        "backward synchronises. 128 forgets the world size; 16 all-reduces is what you get with "
        "the forward outside no_sync() (or no no_sync() at all): the same gradient, 16 times "
        "the traffic.",
    ),
    QuizQuestion(
        "FSDP (ZeRO-3) with 8 micro-batches per step: you turn gradient sync off for the first "
        "7. Counting in model sizes psi as module 4 did, what changes per device and optimizer "
        "step?",
        (
            "It sends 17 psi instead of 24 psi, and holds the whole, unsharded gradient until "
            "the last micro-batch instead of a shard.",
            "It sends 2 psi instead of 24 psi, as no_sync() does for DDP, at no memory cost.",
            "It sends less and holds less, since nothing waits to be reduce-scattered.",
        ),
        0,
        "Each micro-batch all-gathers the weights for forward and backward (2 psi) and "
        "reduce-scatters the gradients (psi): 3 x 8 = 24 psi. Sync off skips 7 reduce-scatters, "
        "(2 x 8 + 1) psi = 17 psi, but the weights are still gathered every time, and the "
        "gradients wait whole: the memory sharding was meant to save.",
    ),
    QuizQuestion(
        "You want 100 samples per optimizer step, and you measured that at most 32 fit in "
        "memory at once. Which micro-batch size and accum_steps?",
        (
            "32 and 3.",
            "32 and 4.",
            "20 and 5.",
            "25 and 4.",
        ),
        3,
        "25 is the largest divisor of 100 that fits, and 4 passes is the fewest any plan can "
        "make (ceil(100 / 32) = 4). 32 x 3 steps on 96 samples, 32 x 4 on 128; 20 x 5 is right "
        "but takes a fifth pass with smaller, less efficient micro-batches.",
    ),
    QuizQuestion(
        "You wrap each transformer block of the tiny GPT in torch.utils.checkpoint, so "
        "micro-batches of 32 fit where 8 did. What does it cost?",
        (
            "Accuracy: recomputed activations only approximate the stored ones.",
            "Compute: each block keeps only its input and runs its forward again during "
            "backward, up to one more forward pass per micro-batch; the gradient is the same.",
            "Nothing: it moves activations to the CPU.",
            "Accumulation: checkpointed micro-batches cannot be accumulated.",
        ),
        1,
        "Backward costs about two forwards, so one more forward is up to a third more compute "
        "(PyTorch's default checkpoint may stop recomputing early). Dropout gets the same masks "
        "(the random state is restored), and checkpointed micro-batches accumulate to the "
        "full-batch gradient like any others: fewer, larger micro-batches can win back the "
        "time. Measure both.",
    ),
    QuizQuestion(
        "An epoch of 22 batches from a dataloader passed through accelerator.prepare, with "
        "Accelerator(gradient_accumulation_steps=8) and accelerator.backward(loss). What does "
        "the last step of the epoch follow?",
        (
            "The mean gradient of its 6 batches: Accelerate syncs at the end of the dataloader.",
            "Nothing: the last 6 batches are dropped.",
            "The mean of its 6 batches and the first 2 of the next epoch.",
            "3/4 of the mean gradient of its 6 batches.",
        ),
        3,
        "Windows of 8, 8 and 6. Accelerate does step at the end of the dataloader, but "
        "backward() divides every loss by 8, the last window's too: 6/8 of the mean. Under SGD "
        "that step is a quarter too short. Multiply the last window's losses by 8/6, so "
        "that each weighs 1/6, its share of the window. (With a dataloader that did not go "
        "through prepare, Accelerate would not see the epoch end: the third answer.)",
    ),
    QuizQuestion(
        "A window of the HF Trainer has two micro-batches, with 300 and 100 real label tokens. "
        "Until October 2024 each micro-batch's mean loss was divided by "
        "gradient_accumulation_steps = 2. What did the fix (num_items_in_batch) change?",
        (
            "Only the logged loss; the gradients were already right.",
            "Each micro-batch's mean loss is weighted by its share of the window's sequences.",
            "Each micro-batch's summed loss is divided by 400, the window's real label tokens: "
            "every token weighs 1/400, where before a token weighed 1/600 in the first "
            "micro-batch and 1/200 in the second.",
        ),
        2,
        "The mean of means gives a token 1/(N x T_k), so the loss and the gradient changed "
        "with gradient_accumulation_steps at the same effective batch. num_items_in_batch "
        "counts the window's labels that are not -100 (with average_tokens_across_devices, "
        "those of all ranks). Weighting by "
        "sequences is the rule for one value per sample; a language model's loss is a mean "
        "over tokens.",
    ),
]

QUIZZES = {
    "00_welcome": Quiz("Quick quiz: module 0", _WELCOME),
    "01_accumulation": Quiz("Quiz: accumulating gradients", _ACCUMULATION),
    "02_loss_scaling": Quiz("Quiz: scaling the loss", _LOSS_SCALING),
    "03_batch_dependence": Quiz("Quiz: when samples depend on each other", _BATCH_DEPENDENCE),
    "04_distributed": Quiz("Quiz: data parallelism, ZeRO and pipelines", _DISTRIBUTED),
    "05_capstone": Quiz("Final quiz: the whole course", _FINAL),
}


def quiz(module: str) -> Quiz:
    """The quiz of a module, e.g. ``quiz("01_accumulation").show()``."""
    return QUIZZES[choice("module", module, QUIZZES)]
