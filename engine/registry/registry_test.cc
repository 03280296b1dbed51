#include "engine/registry/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

namespace engine::registry {
namespace {

struct Shape {
  std::string type;
  double size = 0;
  bool filled = false;
  int scale = 1;
};

Registry<Shape, int>& shapes() {
  static Registry<Shape, int> registry("SHAPES");
  return registry;
}

const Registration<Registry<Shape, int>> kSquare(shapes(), "Square",
                                                 [](ConfigReader& config, int scale) {
                                                   Shape shape{"Square"};
                                                   shape.size = config.require<double>("size");
                                                   shape.filled = config.get("filled", false);
                                                   shape.scale = scale;
                                                   return shape;
                                                 });
const Registration<Registry<Shape, int>> kDot(shapes(), "Dot",
                                              [](ConfigReader&, int) { return Shape{"Dot"}; });

// The ConfigError `act` throws; "no error" if none.
std::string config_error_of(const std::function<void()>& act) {
  try {
    act();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

std::string error_of(const Json& config, const std::string& default_type = "") {
  return config_error_of([&] { shapes().build(config, 1, default_type); });
}

TEST(RegistryTest, BuildsTheNamedTypeWithItsKeysAndArguments) {
  const Shape shape = shapes().build(Json::parse(R"({"type": "Square", "size": 2.5})"), 3);
  EXPECT_EQ(shape.type, "Square");
  EXPECT_EQ(shape.size, 2.5);
  EXPECT_FALSE(shape.filled);
  EXPECT_EQ(shape.scale, 3);
  EXPECT_TRUE(
      shapes().build(Json::parse(R"({"type": "Square", "size": 1, "filled": true})"), 1).filled);
}

TEST(RegistryTest, TheDefaultTypeAppliesOnlyWhenTypeIsAbsent) {
  EXPECT_EQ(shapes().build(Json::parse(R"({})"), 1, "Dot").type, "Dot");
  EXPECT_EQ(shapes().build(Json::parse(R"({"type": "Square", "size": 1})"), 1, "Dot").type,
            "Square");
}

TEST(RegistryTest, AnUnknownTypeListsTheKnownOnes) {
  const auto error = error_of(Json::parse(R"({"type": "Circle"})"));
  EXPECT_NE(error.find("SHAPES has the unknown type \"Circle\"; known types: Dot, Square"),
            std::string::npos)
      << error;
  EXPECT_NE(error_of(Json::parse("{}")).find("lacks \"type\"; known types: Dot, Square"),
            std::string::npos);
}

TEST(RegistryTest, AnUnknownKeyIsNamedWithTheAcceptedOnes) {
  const auto error = error_of(Json::parse(R"({"type": "Square", "size": 1, "colour": "red"})"));
  EXPECT_NE(error.find("SHAPES (Square) has unknown key(s) colour; accepted keys: filled, size, "
                       "type"),
            std::string::npos)
      << error;
}

TEST(RegistryTest, AWrongValueTypeNamesTheKeyAndTheExpectedType) {
  const auto error = error_of(Json::parse(R"({"type": "Square", "size": "big"})"));
  EXPECT_NE(error.find("key \"size\" must be a number, not string (\"big\")"), std::string::npos)
      << error;
  EXPECT_NE(error_of(Json::parse(R"({"type": "Square", "size": 1, "filled": 1})"))
                .find("key \"filled\" must be a boolean, not number"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type": 7})")).find("key \"type\" must be a string"),
            std::string::npos);
}

// The ConfigError `read` meets in `config`; "no error" if none.
template <typename Read>
std::string reader_error_of(const char* config, Read read) {
  return config_error_of([&] {
    ConfigReader reader(Json::parse(config), "cfg");
    read(reader);
  });
}

TEST(RegistryTest, IntegersOutsideTheirTypeAreRefusedNotWrapped) {
  // nlohmann keeps 2^64 - 1 unsigned; read as a signed value it would be -1.
  const auto as_int64 = [](ConfigReader& reader) { reader.get<int64_t>("n", 0); };
  EXPECT_NE(reader_error_of(R"({"n": 18446744073709551615})", as_int64)
                .find("key \"n\" must be an integer that fits 64 bits, not number"),
            std::string::npos);
  EXPECT_EQ(reader_error_of(R"({"n": 9223372036854775807})", as_int64), "no error");
  const auto as_int = [](ConfigReader& reader) { reader.get<int>("n", 0); };
  for (const char* config : {R"({"n": 18446744073709551615})", R"({"n": 4294967296})"}) {
    EXPECT_NE(reader_error_of(config, as_int).find("must be an integer that fits 32 bits"),
              std::string::npos)
        << config;
  }
  const auto as_list = [](ConfigReader& reader) { reader.get<std::vector<int64_t>>("n", {}); };
  EXPECT_NE(reader_error_of(R"({"n": [1, 18446744073709551615]})", as_list)
                .find("must be an array of integers that fit 64 bits"),
            std::string::npos);
}

TEST(RegistryTest, AWholeNumberMayBeWrittenAsAnyNumberWithinItsBounds) {
  int64_t read = 0;
  const auto whole = [&](ConfigReader& reader) { read = reader.get_whole("n", 7, 1, 1000); };
  EXPECT_EQ(reader_error_of(R"({"n": 5e2})", whole), "no error");
  EXPECT_EQ(read, 500);
  EXPECT_EQ(reader_error_of("{}", whole), "no error");
  EXPECT_EQ(read, 7);
  for (const char* config : {R"({"n": 0})", R"({"n": 2.5})", R"({"n": 1e300})", R"({"n": -1e300})",
                             R"({"n": 18446744073709551615})"}) {
    EXPECT_NE(reader_error_of(config, whole)
                  .find("key \"n\" must be a whole number from 1 to 1000, not "),
              std::string::npos)
        << config;
  }
  EXPECT_NE(reader_error_of(R"({"n": "5"})", whole).find("key \"n\" must be a number, not string"),
            std::string::npos);
}

TEST(RegistryTest, AMissingRequiredKeyIsNamed) {
  EXPECT_NE(error_of(Json::parse(R"({"type": "Square"})"))
                .find("SHAPES (Square) lacks the required key \"size\""),
            std::string::npos);
}

TEST(RegistryTest, NonObjectsAndDuplicateNamesAreRejected) {
  EXPECT_NE(error_of(Json::parse("[1, 2]")).find("must be a JSON object"), std::string::npos);
  EXPECT_THROW(shapes().add("Dot", [](ConfigReader&, int) { return Shape{}; }),
               dist::InvalidArgument);
}

TEST(ConfigReaderTest, IntegersMustFitAndArraysMustHoldIntegers) {
  ConfigReader reader(Json::parse(R"({"big": 10000000000, "list": [1, "x"]})"), "test");
  EXPECT_THROW(reader.get<int>("big", 0), ConfigError);
  EXPECT_EQ(reader.get<int64_t>("big", 0), 10000000000);
  EXPECT_THROW(reader.get<std::vector<int64_t>>("list", {}), ConfigError);
}

std::string parse_error_of(const std::string& text) {
  return config_error_of([&] { parse_config(text, "cfg.json"); });
}

// `levels` arrays inside the top object.
std::string nested(int levels) {
  return R"({"a": )" + std::string(levels, '[') + std::string(levels, ']') + "}";
}

TEST(ParseConfigTest, ReadsAnObject) {
  EXPECT_EQ(parse_config(R"({"type": "Dot", "n": [1, 2]})", "cfg.json"),
            Json::parse(R"({"n": [1, 2], "type": "Dot"})"));
}

TEST(ParseConfigTest, BadTextIsAConfigErrorNamingTheSourceAndTheByte) {
  const auto error = parse_error_of(R"({"type": "Dot",})");
  EXPECT_NE(error.find("config cfg.json is not valid JSON at byte 16"), std::string::npos) << error;
  EXPECT_NE(parse_error_of("[1, 2]").find("config cfg.json must be a JSON object, not [1,2]"),
            std::string::npos);
  EXPECT_NE(parse_error_of("").find("not valid JSON"), std::string::npos);
  // nlohmann reports this one as out_of_range, not as a parse error.
  EXPECT_NE(parse_error_of(R"({"lr": 1e400})").find("config cfg.json is not valid JSON: "),
            std::string::npos);
}

TEST(ParseConfigTest, NestingIsBoundedBeforeItIsBuilt) {
  EXPECT_EQ(parse_error_of(nested(kMaxConfigDepth - 1)), "no error");
  EXPECT_NE(parse_error_of(nested(kMaxConfigDepth))
                .find("config cfg.json nests objects and arrays deeper than 64 levels"),
            std::string::npos);
  // Far deeper than any stack would follow.
  EXPECT_NE(parse_error_of(nested(1'000'000)).find("deeper than"), std::string::npos);
}

TEST(ParseConfigTest, SizeIsBoundedBeforeParsing) {
  const std::string huge(kMaxConfigBytes + 1, ' ');
  EXPECT_NE(parse_error_of(huge).find("config cfg.json is 16777217 bytes, more than the 16777216"),
            std::string::npos);
  EXPECT_EQ(parse_error_of("{}" + std::string(kMaxConfigBytes - 2, ' ')), "no error");
}

std::string read_error_of(const std::string& path) {
  return config_error_of([&] { read_config_file(path); });
}

TEST(ParseConfigTest, FilesAreReadWhole) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "parse_config";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.json").string();
  std::ofstream(good) << R"({"type": "Dot"})";
  EXPECT_EQ(read_config_file(good), Json::parse(R"({"type": "Dot"})"));
  const std::string big = (dir / "big.json").string();
  std::ofstream(big).close();
  std::filesystem::resize_file(big, kMaxConfigBytes + 1);
  const auto too_big = read_error_of(big);
  EXPECT_NE(too_big.find(big + " is 16777217 bytes"), std::string::npos) << too_big;
  const auto absent = read_error_of((dir / "absent.json").string());
  EXPECT_NE(absent.find("absent.json cannot be read"), std::string::npos) << absent;
}

TEST(ConfigReaderTest, MessagesQuoteLongValuesCut) {
  const std::string long_text(10'000, 'x');
  const auto error = error_of({{"type", "Square"}, {"size", long_text}});
  EXPECT_NE(error.find("key \"size\" must be a number, not string (\"xxx"), std::string::npos);
  EXPECT_LT(error.size(), 400u) << error;
  EXPECT_EQ(brief(Json(long_text)), "\"" + std::string(199, 'x') + "...");
}

}  // namespace
}  // namespace engine::registry
