#include "engine/registry/registry.h"

#include <gtest/gtest.h>

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

std::string error_of(const Json& config, const std::string& default_type = "") {
  try {
    shapes().build(config, 1, default_type);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
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

}  // namespace
}  // namespace engine::registry
