#include "frontend/messages.h"

#include <array>

#include "tokpos/error.h"

namespace tokpos::frontend {
namespace {

// Labels and sentences of the report. Technical symbols (B, T, D, L, V, k,
// p, cos, PE, R_k) and the flags stay as they are in both languages.
constexpr std::array kDemoMessages{
    // The variants' names, in the tables and the progress labels.
    Message{"name.learned", "learned", "学习式"},
    Message{"name.sinusoidal", "sinusoidal", "正弦"},
    Message{"name.trained", "trained", "训练所得"},
    Message{"row.learned", "learned positions", "学习式位置"},
    Message{"row.sinusoidal", "sinusoidal positions", "正弦位置"},
    Message{"row.trained", "trained positions", "训练所得位置"},
    // The progress labels (the CLI's bar on stderr).
    Message{"step.forward", "{} forward", "{}：前向计算"},
    Message{"step.adjacent", "{} adjacent cosine", "{}：相邻余弦"},
    Message{"step.offset", "{} cosine by offset", "{}：按间隔 k 的余弦"},
    Message{"step.fit", "{} relative fit k = {}", "{}：相对位置拟合 k = {}"},
    // The report.
    Message{"title", "tokpos demo: token ids -> token rows + position rows -> the (B, T, D) input to attention",
            "tokpos demo：词元 id -> 词元行 + 位置行 -> 注意力的输入 (B, T, D)"},
    Message{"label.text", "text", "文本"},
    Message{"text.bytes", "({} bytes)", "（{} 字节）"},
    Message{"label.ids", "ids", "id"},
    Message{"ids.note", "byte tokenizer: id = byte + 4", "字节分词器：id = 字节值 + 4"},
    Message{"label.shapes", "shapes", "形状"},
    Message{"shapes", "ids (B, T) = ({}, {})  ->  output (B, T, D) = ({}, {}, {})",
            "id (B, T) = ({}, {})  ->  输出 (B, T, D) = ({}, {}, {})"},
    Message{"label.output", "output", "输出"},
    Message{"output", "out[0, 0, :4] = token[{}] + sinusoidal position[0] =", "out[0, 0, :4] = 词元[{}] + 正弦位置[0] ="},
    Message{"label.weights", "weights", "权重"},
    Message{"weights", "{} (preset {}): its position table has L = {}, D = {}; the other tables take that shape",
            "{}（预设 {}）：其位置表 L = {}，D = {}；另外两张表取同样的形状"},
    Message{"params.title", "parameters (V = {}, D = {}, L = {})", "参数量（V = {}，D = {}，L = {}）"},
    Message{"params.header", "                       token table   position table        total",
            "                              词元表           位置表         合计"},
    Message{"adjacent.title", "adjacent-position cosine similarity cos(P[p], P[p+1]), all L-1 = {} pairs",
            "相邻位置的余弦相似度 cos(P[p], P[p+1])，共 L-1 = {} 对"},
    Message{"adjacent.header",
            "               first values                                     mean     std     min     max",
            "               前几个值                                         均值    标准差   最小    最大"},
    Message{"offset.title", "cosine by offset k (mean over p), k = {}:", "按间隔 k 的余弦（对 p 取均值），k = {}："},
    Message{"fit.title",
            "relative-position fit PE(p+k) = R_k PE(p), R_k one 2x2 rotation per sin/cos pair (largest residual):",
            "相对位置拟合 PE(p+k) = R_k PE(p)，R_k 为每个 sin/cos 对各一个 2x2 旋转（最大残差）："},
    Message{"fit.line", "k = 1: {} ({} of the largest entry)   k = {}: {} ({})",
            "k = 1：{}（最大元素的 {} 倍）   k = {}：{}（{}）"},
    Message{"bands.title", "sinusoidal wavelength bands (D = {}, base = {}: {} sin/cos pairs)",
            "正弦波长分段（D = {}，底数 = {}：{} 个 sin/cos 对）"},
    Message{"bands.formula", "pair k repeats every 2*pi*base^(2k/D) positions; neighbouring pairs differ by x{}",
            "第 k 对每隔 2*pi*base^(2k/D) 个位置重复一次；相邻两对的波长之比为 x{}"},
    Message{"bands.pairs", "pairs", "对"},
    Message{"bands.range", "shortest {}, longest {} positions", "最短 {}，最长 {} 个位置"},
    Message{"bands.below_one",
            "base < 1: the wavelength shrinks as k grows (pair 0 is the longest, 2*pi positions), the reverse of "
            "the usual order; every pair repeats within 2*pi positions, so far positions look alike",
            "底数 < 1：波长随 k 增大而变短（第 0 对最长，2*pi 个位置），与通常的顺序相反；"
            "每一对都在 2*pi 个位置内重复，因此相距较远的位置看起来相似"},
    Message{"bands.one",
            "base = 1: every pair has the same wavelength, 2*pi positions, so positions 2*pi apart look alike",
            "底数 = 1：每一对的波长都相同，为 2*pi 个位置，因此相距 2*pi 的位置看起来相似"},
    Message{"look", "what to look at: the sinusoidal rows change smoothly (neighbours ~{}) while the fresh learned "
                    "rows are near-random (~{}); rerun with --dim {} to see fewer pairs spread over the same range "
                    "of wavelengths.",
            "看点：正弦表的行变化平滑（相邻行 ~{}），新初始化的学习式表的行近乎随机（~{}）；"
            "用 --dim {} 再运行一次，可以看到更少的 sin/cos 对铺满同样的波长范围。"},
    // What the trained table's numbers say, chosen by the numbers themselves.
    Message{"trained.title", "what the trained table ({}) shows against the two others:",
            "训练所得的表（{}）与另外两张表相比："},
    Message{"trained.single", "with L = 1 it has no two positions to compare.", "L = 1 时没有两个位置可以比较。"},
    Message{"trained.adjacent",
            "neighbours: mean cos {} (fresh learned {}, sinusoidal {}); the lowest is cos(P[{}], P[{}]) = {}",
            "相邻行：cos 均值 {}（新初始化的学习式表 {}，正弦表 {}）；最低的是 cos(P[{}], P[{}]) = {}"},
    Message{"trained.adjacent.smooth", "training made neighbouring rows alike, as the lesson says.",
            "训练让相邻位置的行变得相像，与课程所说一致。"},
    Message{"trained.adjacent.rough", "its neighbouring rows are not much more alike than random ones.",
            "它的相邻行并不比随机的行更相像。"},
    Message{"trained.offset",
            "by offset: below the sinusoidal table at {} of the {} offsets shown, and rising again at {} of the "
            "{} steps k -> k+1 up to k = {}:",
            "按间隔：在 {} 个间隔上低于正弦表（共列出 {} 个），并在 {} 步上回升"
            "（共 {} 步 k -> k+1，到 k = {} 为止）："},
    Message{"trained.offset.faster.wavy", "it falls faster than the sinusoidal table, and not monotonically.",
            "它比正弦表下降得快，而且不是单调下降。"},
    Message{"trained.offset.faster.monotone", "it falls faster than the sinusoidal table, monotonically.",
            "它比正弦表下降得快，且单调下降。"},
    Message{"trained.offset.slower.wavy", "it does not fall faster than the sinusoidal table, and not monotonically.",
            "它并不比正弦表下降得快，而且不是单调下降。"},
    Message{"trained.offset.slower.monotone", "it does not fall faster than the sinusoidal table; it falls monotonically.",
            "它并不比正弦表下降得快，但单调下降。"},
    Message{"trained.fit",
            "rotation fit at k = {}: relative residual {}, against {} for the sinusoidal table and {} for the fresh "
            "learned one:",
            "k = {} 的旋转拟合：相对残差 {}，正弦表为 {}，新初始化的学习式表为 {}："},
    Message{"trained.fit.none", "no rotation of its sin/cos column pairs moves one position to the next.",
            "它的 sin/cos 列对中，没有哪个旋转能把一个位置移到下一个位置。"},
    Message{"trained.fit.some", "rotations of its column pairs explain part of the step from one position to the next.",
            "列对的旋转只能解释从一个位置到下一个位置的一部分变化。"},
    Message{"trained.fit.all", "rotations of its column pairs move one position to the next, as in the sinusoidal table.",
            "列对的旋转就能把一个位置移到下一个位置，和正弦表一样。"},
    Message{"trained.fit.nopairs", "rotation fit: with D = 1 there is no column pair to rotate.",
            "旋转拟合：D = 1 时没有可以旋转的列对。"},
    Message{"trained.claim.smooth.only", "so the lesson's claim holds for smoothness between neighbours.",
            "所以课程的说法在“相邻行平滑”这一点上成立。"},
    Message{"trained.claim.smooth", "so the lesson's claim holds for smoothness between neighbours, but the table has not "
                                    "grown the sinusoidal table's structure of rotations.",
            "所以课程的说法在“相邻行平滑”这一点上成立，但这张表并没有长出正弦表那种由旋转构成的结构。"},
    Message{"trained.claim.sinusoidal", "so the table grew smooth and close to the sinusoidal structure, as the lesson "
                                        "says.",
            "所以这张表确实变得平滑，也接近正弦表的结构，与课程所说一致。"},
    Message{"trained.claim.rough", "so on this table the lesson's claim does not hold: it did not grow smooth.",
            "所以在这张表上，课程的说法不成立：它并没有变得平滑。"},
    // tokpos plot --weights RUN.safetensors: the training run's pictures.
    Message{"run.heatmaps.title", "The learned position table during training: {}", "训练过程中的学习式位置表：{}"},
    Message{"run.heatmaps.sub",
            "L = {} positions x D = {}; {} of the {} snapshots, each on its own colour scale (its largest |value|, "
            "above it)",
            "L = {} 个位置 x D = {}；画出 {} 个快照（共 {} 个），每个用自己的颜色刻度（其最大 |值|，见上方）"},
    Message{"run.step", "step {}", "第 {} 步"},
    Message{"run.panel", "step {}: max |value| {}", "第 {} 步：最大 |值| {}"},
    Message{"run.axis.position", "position p", "位置 p"},
    Message{"run.axis.dimension", "dimension i", "维度 i"},
    Message{"run.axis.step", "optimizer step", "优化步数"},
    Message{"run.axis.cosine", "mean cosine", "平均余弦"},
    Message{"run.axis.loss", "loss", "损失"},
    Message{"run.diag.title", "Cosine by offset of the learned table, step by step", "学习式表按间隔 k 的余弦，逐步变化"},
    Message{"run.diag.sub", "mean over p of cos(P[p], P[p+k]); dashed: the sinusoidal table, which does not change",
            "对 p 取 cos(P[p], P[p+k]) 的均值；虚线：正弦表（它不随训练变化）"},
    Message{"run.diag.adjacent", "k = {}, adjacent rows", "k = {}，相邻行"},
    Message{"run.diag.offset", "offset k = {}", "间隔 k = {}"},
    Message{"run.fit.title", "Rotation fit of the learned table, step by step", "学习式表的旋转拟合，逐步变化"},
    Message{"run.fit.sub",
            "relative residual of PE(p+k) = R_k PE(p), R_k one 2x2 rotation per column pair; dashed: the sinusoidal "
            "table",
            "PE(p+k) = R_k PE(p) 的相对残差，R_k 为每个列对各一个 2x2 旋转；虚线：正弦表"},
    Message{"run.fit.offset", "fit at k = {}", "k = {} 的拟合"},
    Message{"run.axis.residual", "relative residual", "相对残差"},
    Message{"run.caption.fit", "relative residual of the rotation fit at k = 1: {} at step {}, {} at step {} (sinusoidal {})",
            "k = 1 的旋转拟合相对残差 {}（第 {} 步），{}（第 {} 步）（正弦表 {}）"},
    Message{"run.loss.title", "Loss during training: learned against sinusoidal positions",
            "训练中的损失：学习式位置对比正弦位置"},
    Message{"run.loss.sub", "at step {}: held-out loss {} (learned), {} (sinusoidal)",
            "第 {} 步：留出损失 {}（学习式），{}（正弦）"},
    Message{"run.loss.train.learned", "train, learned", "训练集，学习式"},
    Message{"run.loss.heldout.learned", "held-out, learned", "留出集，学习式"},
    Message{"run.loss.train.sinusoidal", "train, sinusoidal", "训练集，正弦"},
    Message{"run.loss.heldout.sinusoidal", "held-out, sinusoidal", "留出集，正弦"},
    Message{"run.caption.heatmaps", "the learned table at steps {}: noise at the start, then what training made of it",
            "学习式表在第 {} 步的样子：起初是噪声，之后是训练塑造的结果"},
    Message{"run.caption.diagnostics", "mean adjacent cosine {} at step {}, {} at step {} (sinusoidal {})",
            "相邻余弦均值 {}（第 {} 步），{}（第 {} 步）（正弦表 {}）"},
    Message{"run.caption.loss", "held-out loss at step {}: learned {}, sinusoidal {}",
            "第 {} 步的留出损失：学习式 {}，正弦 {}"},
};

// One UTF-8 code point at s[i]: its value, and i moved past it (a byte that
// does not start a whole sequence counts as one code point of its own).
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 0;
  bool whole = n > 0 && i + n < s.size();
  for (size_t k = 1; whole && k <= n; ++k) whole = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
  if (!whole) {
    ++i;
    return c;
  }
  char32_t cp = c & (0x3fu >> n);
  for (size_t k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3fu);
  i += n + 1;
  return cp;
}

bool wide(char32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0xa4cf) || (cp >= 0xac00 && cp <= 0xd7a3) ||
         (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
         (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x20000 && cp <= 0x3fffd);
}

}  // namespace

std::span<const Message> demo_messages() { return kDemoMessages; }

std::string tr(Lang lang, std::string_view key, std::initializer_list<std::string_view> args) {
  for (const Message& m : kDemoMessages) {
    if (m.key != key) continue;
    const std::string_view text = lang == Lang::kZh ? m.zh : m.en;
    std::string out;
    const std::string_view* arg = args.begin();
    size_t i = 0;
    while (i < text.size()) {
      if (text.compare(i, 2, "{}") == 0) {
        if (arg == args.end()) break;
        out += *arg++;
        i += 2;
      } else {
        out += text[i++];
      }
    }
    if (i < text.size() || arg != args.end()) {
      throw Error(Status::kInternal, "demo message '" + std::string(key) + "' (" + std::string(lang_name(lang)) +
                                         ") does not take " + std::to_string(args.size()) + " arguments");
    }
    return out;
  }
  throw Error(Status::kInternal, "demo message '" + std::string(key) + "' is not in the catalogue");
}

size_t display_width(std::string_view s) {
  size_t width = 0;
  for (size_t i = 0; i < s.size();) width += wide(next_code_point(s, i)) ? 2 : 1;
  return width;
}

std::string pad_right(std::string_view s, size_t width) {
  const size_t w = display_width(s);
  return std::string(s) + std::string(w < width ? width - w : 0, ' ');
}

std::string pad_left(std::string_view s, size_t width) {
  const size_t w = display_width(s);
  return std::string(w < width ? width - w : 0, ' ') + std::string(s);
}

}  // namespace tokpos::frontend
