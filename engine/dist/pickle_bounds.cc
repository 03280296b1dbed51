#include "engine/dist/pickle_bounds.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/zip_index.h"

namespace engine::dist {
namespace {

// What each allowed global does when called (REDUCE) or named in a
// persistent id.
enum class Global { kOrderedDict, kRebuildTensor, kBuildList, kRestoreTypeTag, kStorage };

struct AllowedGlobal {
  Global role;
  int64_t element_bytes;  // kStorage only
};

const std::map<std::string, AllowedGlobal>& allowed_globals() {
  static const std::map<std::string, AllowedGlobal> globals = {
      {"collections OrderedDict", {Global::kOrderedDict, 0}},
      {"torch._utils _rebuild_tensor_v2", {Global::kRebuildTensor, 0}},
      {"torch.jit._pickle build_intlist", {Global::kBuildList, 0}},
      {"torch.jit._pickle build_doublelist", {Global::kBuildList, 0}},
      {"torch.jit._pickle build_boollist", {Global::kBuildList, 0}},
      {"torch.jit._pickle build_tensorlist", {Global::kBuildList, 0}},
      {"torch.jit._pickle restore_type_tag", {Global::kRestoreTypeTag, 0}},
      {"torch BoolStorage", {Global::kStorage, 1}},
      {"torch ByteStorage", {Global::kStorage, 1}},
      {"torch CharStorage", {Global::kStorage, 1}},
      {"torch ShortStorage", {Global::kStorage, 2}},
      {"torch IntStorage", {Global::kStorage, 4}},
      {"torch LongStorage", {Global::kStorage, 8}},
      {"torch HalfStorage", {Global::kStorage, 2}},
      {"torch BFloat16Storage", {Global::kStorage, 2}},
      {"torch FloatStorage", {Global::kStorage, 4}},
      {"torch DoubleStorage", {Global::kStorage, 8}},
      {"torch ComplexFloatStorage", {Global::kStorage, 8}},
      {"torch ComplexDoubleStorage", {Global::kStorage, 16}},
  };
  return globals;
}

// What the check knows of a value the pickle builds.
struct Node {
  enum class Kind {
    kScalar,
    kInt,
    kBool,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = Kind::kScalar;
  int64_t number = 0;  // kInt, kBool; kStorage: its elements
  std::string text;    // kString; kGlobal: "module name"; kStorage: its record
  std::vector<std::shared_ptr<Node>> items;  // kTuple, kList, kDict (keys and values)
  size_t depth = 0;                          // containers, counting this one
  size_t weight = 1;                         // values, once per reference
  bool frozen = false;                       // inside another value: no more changes
};
using NodePtr = std::shared_ptr<Node>;

const char* kind_name(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::kScalar:
      return "a number or None";
    case Node::Kind::kInt:
      return "an int";
    case Node::Kind::kBool:
      return "a bool";
    case Node::Kind::kString:
      return "a string";
    case Node::Kind::kTuple:
      return "a tuple";
    case Node::Kind::kList:
      return "a list";
    case Node::Kind::kDict:
      return "a dict";
    case Node::Kind::kGlobal:
      return "a global";
    case Node::Kind::kStorage:
      return "a storage";
    case Node::Kind::kTensor:
      return "a tensor";
  }
  return "a value";
}

// Runs data.pkl's opcodes on values that stand for what the unpickler
// would build, checking each rule of check_pickle_archive as it goes.
class Scan {
 public:
  Scan(std::string_view pickle, const std::map<std::string, std::string_view>& records,
       const std::string& what)
      : pickle_(pickle),
        records_(records),
        what_(what),
        value_budget_(std::max(kMinPickleValueBudget, 4 * pickle.size())) {}

  void run() {
    while (true) {
      opcode_at_ = at_;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      if (op == '.') break;
      step(op);
    }
    if (at_ != pickle_.size()) {
      fail(std::to_string(pickle_.size() - at_) + " bytes follow its STOP");
    }
    if (!marks_.empty() || stack_.size() != 1) {
      fail("STOP with " + std::to_string(stack_.size()) + " values and " +
           std::to_string(marks_.size()) + " open marks, where one value and none are due");
    }
  }

 private:
  void step(unsigned char op) {
    switch (op) {
      case 0x80:
        return protocol();
      case '(':
        return marks_.push_back(stack_.size());
      case 'N':
        return push(number(Node::Kind::kScalar));
      case 0x88:
        return push(number(Node::Kind::kBool, 1));
      case 0x89:
        return push(number(Node::Kind::kBool, 0));
      case 'J':
        return push(number(Node::Kind::kInt, signed_field(4)));
      case 'K':
        return push(number(Node::Kind::kInt, static_cast<int64_t>(field(1))));
      case 'M':
        return push(number(Node::Kind::kInt, static_cast<int64_t>(field(2))));
      case 0x8a:
        return push(number(Node::Kind::kInt, long1()));
      case 'G':
        take(8);
        return push(number(Node::Kind::kScalar));
      case 'X':
        return push(string(std::string(take(field(4))), Node::Kind::kString));
      case 'c':
        return push(global());
      case ')':
        return push(container(Node::Kind::kTuple, {}));
      case 't':
        return push(container(Node::Kind::kTuple, pop_to_mark()));
      case 0x85:
        return push(container(Node::Kind::kTuple, pop_n(1)));
      case 0x86:
        return push(container(Node::Kind::kTuple, pop_n(2)));
      case 0x87:
        return push(container(Node::Kind::kTuple, pop_n(3)));
      case ']':
        return push(container(Node::Kind::kList, {}));
      case '}':
        return push(container(Node::Kind::kDict, {}));
      case 'a':
        return extend(Node::Kind::kList, pop_n(1));
      case 'e':
        return extend(Node::Kind::kList, pop_to_mark());
      case 's':
        return extend(Node::Kind::kDict, pop_n(2));
      case 'u':
        return extend(Node::Kind::kDict, pop_to_mark());
      case 'q':
        return memoize(field(1));
      case 'r':
        return memoize(field(4));
      case 'h':
        return recall(field(1));
      case 'j':
        return recall(field(4));
      case 'Q':
        return push(persistent_storage(pop()));
      case 'R':
        return reduce();
      default:
        fail("opcode 0x" + hex(op) +
             " builds something other than the data the engine writes (tensors, containers, "
             "numbers, strings)");
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw MalformedInput(what_ + " is not an archive the engine reads (data.pkl byte " +
                         std::to_string(opcode_at_) + "): " + why);
  }

  static std::string hex(unsigned value) {
    const char* digits = "0123456789abcdef";
    return {digits[value >> 4 & 0xF], digits[value & 0xF]};
  }

  std::string_view take(uint64_t bytes) {
    if (bytes > pickle_.size() - at_) {
      fail("it asks for " + std::to_string(bytes) + " bytes where " +
           std::to_string(pickle_.size() - at_) + " are left (cut short, or a false length)");
    }
    const std::string_view taken = pickle_.substr(at_, bytes);
    at_ += bytes;
    return taken;
  }

  uint64_t field(size_t bytes) {
    const std::string_view raw = take(bytes);
    uint64_t value = 0;
    for (size_t i = bytes; i-- > 0;) value = value << 8 | static_cast<unsigned char>(raw[i]);
    return value;
  }

  int64_t signed_field(size_t bytes) {
    const uint64_t value = field(bytes);
    const uint64_t sign = uint64_t{1} << (8 * bytes - 1);
    return static_cast<int64_t>((value ^ sign) - sign);
  }

  int64_t long1() {
    const uint64_t bytes = field(1);
    if (bytes > 8)
      fail("an int of " + std::to_string(bytes) + " bytes; the engine reads 64-bit ints");
    return bytes == 0 ? 0 : signed_field(bytes);
  }

  void protocol() {
    const uint64_t version = field(1);
    if (version != 2) {
      fail("pickle protocol " + std::to_string(version) +
           "; the engine reads protocol 2 (torch.save's default)");
    }
  }

  std::string line() {
    const size_t end = pickle_.find('\n', at_);
    if (end == std::string_view::npos) fail("a GLOBAL's name has no end");
    const size_t length = end - at_;
    return std::string(take(length + 1).substr(0, length));
  }

  NodePtr global() {
    const std::string module = line();
    const std::string name = module + " " + line();
    if (allowed_globals().count(name) == 0) {
      fail("global " + module + "." + name.substr(module.size() + 1) +
           " is not one the engine writes: it loads only tensors, containers, numbers and "
           "strings (as torch.load(weights_only=True))");
    }
    return string(name, Node::Kind::kGlobal);
  }

  // A value without items: a number, a bool, None or a tensor.
  static NodePtr number(Node::Kind kind, int64_t value = 0) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->number = value;
    return node;
  }

  static NodePtr string(std::string text, Node::Kind kind) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->text = std::move(text);
    return node;
  }

  NodePtr container(Node::Kind kind, std::vector<NodePtr> items) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->depth = 1;
    add_items(*node, std::move(items));
    return node;
  }

  // Items go inside `node` and from then on do not change, so that nothing
  // contains itself and an item's depth and weight are final once counted.
  void add_items(Node& node, std::vector<NodePtr> items) {
    for (NodePtr& item : items) {
      if (item.get() == &node) fail(std::string(kind_name(node.kind)) + " contains itself");
      item->frozen = true;
      node.depth = std::max(node.depth, item->depth + 1);
      node.weight = std::min(node.weight + item->weight, value_budget_ + 1);
      node.items.push_back(std::move(item));
    }
    if (node.depth > kMaxPickleNesting) {
      fail("containers nest deeper than " + std::to_string(kMaxPickleNesting));
    }
    if (node.weight > value_budget_) {
      fail("it builds more than " + std::to_string(value_budget_) +
           " values, counting each once per reference to it");
    }
  }

  void extend(Node::Kind kind, std::vector<NodePtr> items) {
    if (kind == Node::Kind::kDict && items.size() % 2 != 0) {
      fail("SETITEMS with a key and no value");
    }
    const NodePtr target = pop();
    if (target->kind != kind) {
      fail(std::string("adds items to ") + kind_name(target->kind) + " as if it were " +
           kind_name(kind));
    }
    if (target->frozen)
      fail(std::string("changes ") + kind_name(kind) + " already inside another value");
    add_items(*target, std::move(items));
    push(target);
  }

  void memoize(uint64_t id) {
    if (id != memo_.size()) {
      fail("memo id " + std::to_string(id) + " where the next one is " +
           std::to_string(memo_.size()));
    }
    memo_.push_back(top());
  }

  void recall(uint64_t id) {
    if (id >= memo_.size()) {
      fail("memo id " + std::to_string(id) + " read before it was written (" +
           std::to_string(memo_.size()) + " written)");
    }
    push(memo_[id]);
  }

  void push(NodePtr node) { stack_.push_back(std::move(node)); }

  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  const NodePtr& top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }

  NodePtr pop() { return std::move(pop_n(1).front()); }

  std::vector<NodePtr> pop_n(size_t count) {
    if (stack_.size() - floor() < count) fail("stack underflow");
    std::vector<NodePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return items;
  }

  std::vector<NodePtr> pop_to_mark() {
    if (marks_.empty()) fail("no mark to close");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<NodePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  const Node& expect(const NodePtr& node, Node::Kind kind, const std::string& as) const {
    if (node->kind != kind) {
      fail(as + " is " + kind_name(node->kind) + " where " + kind_name(kind) + " is due");
    }
    return *node;
  }

  const Node& tuple_of(const NodePtr& node, size_t size, const std::string& as) const {
    const Node& tuple = expect(node, Node::Kind::kTuple, as);
    if (tuple.items.size() != size) {
      fail(as + " has " + std::to_string(tuple.items.size()) + " items where " +
           std::to_string(size) + " are due");
    }
    return tuple;
  }

  // ('storage', torch.<dtype>Storage, key, location, elements)
  NodePtr persistent_storage(const NodePtr& id) {
    const Node& fields = tuple_of(id, 5, "a persistent id");
    if (expect(fields.items[0], Node::Kind::kString, "a persistent id's kind").text != "storage") {
      fail("a persistent id of kind " + fields.items[0]->text + "; the engine reads storages");
    }
    const Node& type = expect(fields.items[1], Node::Kind::kGlobal, "a storage's type");
    const AllowedGlobal& allowed = allowed_globals().at(type.text);
    if (allowed.role != Global::kStorage) fail(type.text + " is not a storage type");
    const std::string key =
        "data/" + expect(fields.items[2], Node::Kind::kString, "a storage's key").text;
    const int64_t elements = expect(fields.items[4], Node::Kind::kInt, "a storage's size").number;
    const auto record = records_.find(key);
    if (record == records_.end()) fail("a storage in record " + key + ", which the archive lacks");
    const int64_t bytes = allowed.element_bytes;
    if (elements < 0 || static_cast<uint64_t>(elements) != record->second.size() / bytes ||
        record->second.size() % bytes != 0) {
      fail("a storage of " + std::to_string(elements) + " elements of " + std::to_string(bytes) +
           " bytes in record " + key + ", which holds " + std::to_string(record->second.size()) +
           " bytes");
    }
    auto storage = string(key, Node::Kind::kStorage);
    storage->number = elements;
    return storage;
  }

  void reduce() {
    const NodePtr args = pop();
    const NodePtr callable = pop();
    expect(args, Node::Kind::kTuple, "a call's arguments");
    if (callable->kind != Node::Kind::kGlobal) {
      fail(std::string("calls ") + kind_name(callable->kind));
    }
    switch (allowed_globals().at(callable->text).role) {
      case Global::kOrderedDict:
        tuple_of(args, 0, "OrderedDict's arguments");
        return push(container(Node::Kind::kDict, {}));
      case Global::kRebuildTensor:
        return push(tensor(*args));
      case Global::kBuildList:
        // The same list, typed; it is inside the arguments, so it no longer changes.
        expect(tuple_of(args, 1, "a list builder's arguments").items[0], Node::Kind::kList,
               "a list builder's argument");
        return push(args->items[0]);
      case Global::kRestoreTypeTag:
        tuple_of(args, 2, "restore_type_tag's arguments");
        check_type_tag(*args->items[1]);
        return push(args->items[0]);
      case Global::kStorage:
        fail("calls a storage type");
    }
  }

  void check_type_tag(const Node& tag) {
    if (tag.kind != Node::Kind::kString) fail("a type tag that is not a string");
    size_t depth = 0;
    for (const char c : tag.text) {
      if (c == '[' || c == '(') ++depth;
      if (c == ']' || c == ')') depth -= depth > 0 ? 1 : 0;
      if (depth > kMaxPickleNesting) {
        fail("a type tag nested deeper than " + std::to_string(kMaxPickleNesting));
      }
    }
  }

  // _rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks)
  NodePtr tensor(const Node& args) {
    if (args.items.size() != 6) {
      fail("_rebuild_tensor_v2 with " + std::to_string(args.items.size()) +
           " arguments where 6 are due");
    }
    const Node& storage = expect(args.items[0], Node::Kind::kStorage, "a tensor's storage");
    const int64_t offset = expect(args.items[1], Node::Kind::kInt, "a tensor's offset").number;
    const Node& sizes = expect(args.items[2], Node::Kind::kTuple, "a tensor's sizes");
    const Node& strides = tuple_of(args.items[3], sizes.items.size(), "a tensor's strides");
    check_extent(storage, offset, sizes, strides);
    return number(Node::Kind::kTensor);
  }

  void check_extent(const Node& storage, int64_t offset, const Node& sizes, const Node& strides) {
    int64_t elements = 1;
    int64_t last = offset;
    bool overflow = offset < 0;
    for (size_t d = 0; d < sizes.items.size(); ++d) {
      const Node& size = *sizes.items[d];
      const Node& stride = *strides.items[d];
      if (size.kind != Node::Kind::kInt || stride.kind != Node::Kind::kInt || size.number < 0 ||
          stride.number < 0) {
        fail("a tensor's sizes and strides must be ints of at least 0");
      }
      if (size.number == 0) return;  // no elements: no bytes read
      int64_t reach = 0;
      overflow |= __builtin_mul_overflow(size.number - 1, stride.number, &reach) ||
                  __builtin_add_overflow(last, reach, &last) ||
                  __builtin_mul_overflow(elements, size.number, &elements);
    }
    if (overflow || last >= storage.number || elements > storage.number) {
      fail("a tensor reaches past its storage " + storage.text + " of " +
           std::to_string(storage.number) + " elements, or holds more elements than it (offset " +
           std::to_string(offset) + ")");
    }
  }

  std::string_view pickle_;
  const std::map<std::string, std::string_view>& records_;
  const std::string& what_;
  const size_t value_budget_;
  size_t at_ = 0;
  size_t opcode_at_ = 0;
  std::vector<NodePtr> stack_;
  std::vector<size_t> marks_;
  std::vector<NodePtr> memo_;
};

// PyTorchStreamReader's constructor reads the format version; a throw there
// leaks the zip reader's state, so that what it refuses is refused here.
void check_format_version(const std::map<std::string, std::string_view>& records,
                          const std::string& what) {
  auto version = records.find(".data/version");
  if (version == records.end()) version = records.find("version");
  if (version == records.end()) {
    throw MalformedInput(what + " is not an archive the engine reads: it has no version record");
  }
  std::string_view digits = version->second;
  if (!digits.empty() && digits.back() == '\n') digits.remove_suffix(1);
  const bool numeric =
      !digits.empty() && digits.size() <= 2 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int number = numeric ? std::stoi(std::string(digits)) : 0;
  if (number < kMinArchiveVersion || number > kMaxArchiveVersion) {
    throw MalformedInput(what + " is not an archive the engine reads: format version \"" +
                         std::string(version->second.substr(0, 16)) + "\", where " +
                         std::to_string(kMinArchiveVersion) + " to " +
                         std::to_string(kMaxArchiveVersion) + " are read");
  }
}

}  // namespace

void check_pickle_archive(std::string_view archive, const std::string& what) {
  const std::map<std::string, std::string_view> records = zip_records(archive, what);
  check_format_version(records, what);
  const auto pickle = records.find("data.pkl");
  if (pickle == records.end()) {
    throw MalformedInput(what + " is not an archive the engine reads: it has no data.pkl record");
  }
  Scan(pickle->second, records, what).run();
}

}  // namespace engine::dist
